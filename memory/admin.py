from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from memory.models import EventEmbedding


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
