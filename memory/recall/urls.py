"""Routes of recall and reflection: ``/api/v1/recall/`` and ``/api/v1/reflections/``."""

from __future__ import annotations

from typing import Any

from rest_framework.routers import SimpleRouter

from memory.recall.api import RecallViewSet, ReflectionViewSet

api_router = SimpleRouter()
api_router.register("recall", RecallViewSet, basename="recall")
api_router.register("reflections", ReflectionViewSet, basename="reflection")

api_urlpatterns: list[Any] = [*api_router.urls]
page_urlpatterns: list[Any] = []
