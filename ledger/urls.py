from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from ledger.api import AgentViewSet, ApiKeyViewSet, EventViewSet, RecallSettingsViewSet
from ledger.jobs_api import JobViewSet

api_router = SimpleRouter()
api_router.register("agents", AgentViewSet, basename="agent")
api_router.register("api-keys", ApiKeyViewSet, basename="api-key")
api_router.register("events", EventViewSet, basename="event")

api_urls = [
    *api_router.urls,
    path(
        "recall-settings/",
        RecallSettingsViewSet.as_view({"get": "retrieve", "patch": "partial_update"}),
        name="recall-settings",
    ),
    path("jobs/", JobViewSet.as_view({"get": "list"}), name="jobs"),
]
