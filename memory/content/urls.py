"""Routes of the content store (included under /api/v1/ by config.urls)."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

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
