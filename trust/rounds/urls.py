"""Routes of rounds, dissents and overrides (trust.rounds.api), under /api/v1/; their pages are in
trust.pages."""

from __future__ import annotations

from typing import Any

from rest_framework.routers import SimpleRouter

from trust.rounds.api import DissentViewSet, OverrideViewSet, RoundViewSet

api_router = SimpleRouter()
api_router.register("rounds", RoundViewSet, basename="round")
api_router.register("dissents", DissentViewSet, basename="dissent")
api_router.register("overrides", OverrideViewSet, basename="override")

api_urlpatterns: list[Any] = [*api_router.urls]
page_urlpatterns: list[Any] = []
