"""Routes of the knowledge base: ``/api/v1/kb/documents/...`` and ``/api/v1/kb/search/``."""

from __future__ import annotations

from typing import Any

from rest_framework.routers import SimpleRouter

from memory.knowledge.api import KnowledgeDocumentViewSet, KnowledgeSearchViewSet

api_router = SimpleRouter()
api_router.register("kb/documents", KnowledgeDocumentViewSet, basename="kb-document")
api_router.register("kb/search", KnowledgeSearchViewSet, basename="kb-search")

api_urlpatterns: list[Any] = [*api_router.urls]
page_urlpatterns: list[Any] = []
