from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from memory.models import EventEmbedding, KnowledgeChunk, KnowledgeDocument


@admin.register(EventEmbedding)
class EventEmbeddingAdmin(admin.ModelAdmin[EventEmbedding]):
    """Derived data: rebuilt from the ledger, never edited by hand."""

    list_display = ["event", "tenant", "model", "created_at"]
    list_filter = ["tenant", "model"]
    exclude = ["embedding"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(KnowledgeDocument)
class KnowledgeDocumentAdmin(admin.ModelAdmin[KnowledgeDocument]):
    """Read-only: documents change through the API, so every change is logged to the ledger."""

    list_display = ["title", "tenant", "kind", "category", "published_at", "updated_at"]
    list_filter = ["tenant", "kind", "category"]
    search_fields = ["title"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(KnowledgeChunk)
class KnowledgeChunkAdmin(admin.ModelAdmin[KnowledgeChunk]):
    """Derived from published articles; rebuilt from the ledger, never edited by hand."""

    list_display = ["document", "position", "heading", "embedding_model"]
    list_filter = ["tenant"]
    exclude = ["embedding", "search_vector"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
