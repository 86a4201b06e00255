"""Routes of trust scores (trust.scores.api), under /api/v1/: ``trust/`` and its actions,
interchange's export and import among them; their pages are in trust.pages."""

from __future__ import annotations

from typing import Any

from rest_framework.routers import SimpleRouter

from trust.scores.api import TrustViewSet

api_router = SimpleRouter()
api_router.register("trust", TrustViewSet, basename="trust")

api_urlpatterns: list[Any] = [*api_router.urls]
page_urlpatterns: list[Any] = []
