"""Routes of the content store: ``/api/v1/content/...`` and the token-savings page."""

from __future__ import annotations

from typing import Any

from django.urls import path
from rest_framework.routers import SimpleRouter

from memory.content import views
from memory.content.api import (
    ContentActionResultViewSet,
    ContentItemViewSet,
    ContentRunViewSet,
    ContentSnapshotViewSet,
)

api_router = SimpleRouter()
api_router.register("content/items", ContentItemViewSet, basename="content-item")
api_router.register(
    "content/action-results", ContentActionResultViewSet, basename="content-action-result"
)
api_router.register("content/runs", ContentRunViewSet, basename="content-run")
api_router.register("content/snapshots", ContentSnapshotViewSet, basename="content-snapshot")

api_urlpatterns: list[Any] = [*api_router.urls]
page_urlpatterns: list[Any] = [path("token-savings/", views.token_savings, name="token_savings")]
