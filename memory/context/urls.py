"""Routes of working memory: ``/api/v1/context/``."""

from __future__ import annotations

from typing import Any

from rest_framework.routers import SimpleRouter

from memory.context.api import ContextViewSet

api_router = SimpleRouter()
api_router.register("context", ContextViewSet, basename="context")

api_urlpatterns: list[Any] = [*api_router.urls]
page_urlpatterns: list[Any] = []
