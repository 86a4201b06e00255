"""Routes of governance (trust.governance.api), under /api/v1/; no pages of its own."""

from __future__ import annotations

from typing import Any

from django.urls import path
from rest_framework.routers import SimpleRouter

from trust.governance.api import (
    DevilsAdvocateViewSet,
    GamingFlagViewSet,
    RubricProposalViewSet,
    RubricVersionViewSet,
    RubricViewSet,
    TrustMetricsViewSet,
)

api_router = SimpleRouter()
api_router.register("flags", GamingFlagViewSet, basename="gaming-flag")
api_router.register("rubric/versions", RubricVersionViewSet, basename="rubric-version")
api_router.register("rubric-proposals", RubricProposalViewSet, basename="rubric-proposal")

api_urlpatterns: list[Any] = [
    path(
        "trust/devils-advocate/",
        DevilsAdvocateViewSet.as_view({"post": "create"}),
        name="trust-devils-advocate",
    ),
    path(
        "trust/metrics/",
        TrustMetricsViewSet.as_view({"get": "retrieve"}),
        name="trust-metrics",
    ),
    path(
        "rubric/",
        RubricViewSet.as_view({"get": "retrieve", "post": "create"}),
        name="rubric",
    ),
    *api_router.urls,
]
page_urlpatterns: list[Any] = []
