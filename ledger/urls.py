from __future__ import annotations

from rest_framework.routers import SimpleRouter

from ledger.api import AgentViewSet, ApiKeyViewSet, EventViewSet

api_router = SimpleRouter()
api_router.register("agents", AgentViewSet, basename="agent")
api_router.register("api-keys", ApiKeyViewSet, basename="api-key")
api_router.register("events", EventViewSet, basename="event")
