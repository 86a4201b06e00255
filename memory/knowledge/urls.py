"""Routes of the knowledge base and of working memory, which builds on it (included under
/api/v1/ by config.urls)."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from memory.context.api import ContextViewSet
from memory.knowledge.api import KnowledgeDocumentViewSet, KnowledgeSearchViewSet

api_router = SimpleRouter()
api_router.register("kb/documents", KnowledgeDocumentViewSet, basename="kb-document")
api_router.register("kb/search", KnowledgeSearchViewSet, basename="kb-search")
api_router.register("context", ContextViewSet, basename="context")
