from __future__ import annotations

from rest_framework.routers import SimpleRouter

from memory.api import MemoryViewSet, RecallViewSet, ReflectionViewSet

api_router = SimpleRouter()
api_router.register("recall", RecallViewSet, basename="recall")
api_router.register("reflections", ReflectionViewSet, basename="reflection")
api_router.register("memories", MemoryViewSet, basename="memory")
