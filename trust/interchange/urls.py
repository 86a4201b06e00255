"""Routes of the full export (trust.interchange.api), under /api/v1/."""

from __future__ import annotations

from typing import Any

from rest_framework.routers import SimpleRouter

from trust.interchange.api import ExportViewSet

api_router = SimpleRouter()
api_router.register("export", ExportViewSet, basename="export")

api_urlpatterns: list[Any] = [*api_router.urls]
page_urlpatterns: list[Any] = []
