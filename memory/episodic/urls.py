"""Routes of episodic memories: ``/api/v1/memories/...`` (search included, as its action) and the
memory explorer page."""

from __future__ import annotations

from typing import Any

from django.urls import path
from rest_framework.routers import SimpleRouter

from memory.episodic import views
from memory.episodic.api import MemoryViewSet

api_router = SimpleRouter()
api_router.register("memories", MemoryViewSet, basename="memory")

api_urlpatterns: list[Any] = [*api_router.urls]
page_urlpatterns: list[Any] = [path("", views.explorer, name="explorer")]
