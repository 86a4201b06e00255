"""The ledger app's routes, in the shape every app's ``urls.py`` has: ``api_urlpatterns`` (under
/api/v1/) and ``page_urlpatterns`` (the pages, each under its own prefix and namespace)."""

from __future__ import annotations

from typing import Any

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from ledger import views
from ledger.api import AgentViewSet, ApiKeyViewSet, EventViewSet, RecallSettingsViewSet
from ledger.jobs_api import JobViewSet
from ledger.people import urls as people_urls

api_router = SimpleRouter()
api_router.register("agents", AgentViewSet, basename="agent")
api_router.register("api-keys", ApiKeyViewSet, basename="api-key")
api_router.register("events", EventViewSet, basename="event")

api_urlpatterns: list[Any] = [
    *api_router.urls,
    path(
        "recall-settings/",
        RecallSettingsViewSet.as_view({"get": "retrieve", "patch": "partial_update"}),
        name="recall-settings",
    ),
    path("jobs/", JobViewSet.as_view({"get": "list"}), name="jobs"),
]

page_urlpatterns: list[Any] = [
    path(
        "ledger/",
        include(
            (
                [
                    path("", views.ledger_browser, name="browser"),
                    path("verify/", views.ledger_verify, name="verify"),
                ],
                "ledger",
            )
        ),
    ),
    path(
        "jobs/",
        include(
            (
                [
                    path("", views.jobs_status, name="status"),
                    path("schedule/", views.jobs_schedule, name="schedule"),
                ],
                "jobs",
            )
        ),
    ),
    path("people/", include("ledger.people.urls")),
    *people_urls.welcome_urlpatterns,
]
