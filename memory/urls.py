"""The memory app's routes, in the shape every app's ``urls.py`` has: ``api_urlpatterns`` (under
/api/v1/) and ``page_urlpatterns`` (the pages, under their own prefix and namespace)."""

from __future__ import annotations

from typing import Any

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from memory.content.urls import api_router as content_api
from memory.episodic import views
from memory.episodic.api import MemoryViewSet, RecallViewSet, ReflectionViewSet
from memory.knowledge.urls import api_router as kb_api

api_router = SimpleRouter()
api_router.register("recall", RecallViewSet, basename="recall")
api_router.register("reflections", ReflectionViewSet, basename="reflection")
api_router.register("memories", MemoryViewSet, basename="memory")

api_urlpatterns: list[Any] = [*api_router.urls, *kb_api.urls, *content_api.urls]

_pages = [
    path("", views.explorer, name="explorer"),
    path("token-savings/", views.token_savings, name="token_savings"),
]
page_urlpatterns: list[Any] = [path("memory/", include((_pages, "memory")))]
