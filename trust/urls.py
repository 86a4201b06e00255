"""The trust app's routes, in the shape every app's ``urls.py`` has: ``api_urlpatterns`` (under
/api/v1/) and ``page_urlpatterns`` (the pages, under their own prefix and namespace)."""

from __future__ import annotations

from typing import Any

from django.urls import include, path

from trust.governance.api import api_urls as governance_urls
from trust.pages import views
from trust.rounds.api import api_urls as core_urls

# Governance first: its trust/devils-advocate/ and trust/metrics/ are words where the core's
# trust/{agent_id}/ takes a value, and a detail route's default pattern ([^/.]+) would swallow
# them if it were tried first.
api_urlpatterns: list[Any] = [*governance_urls, *core_urls]

_pages = [
    path("", views.overview, name="overview"),
    path("agents/<int:pk>/", views.agent_detail, name="agent"),
    path("agents/<int:pk>/export.json", views.agent_export, name="agent_export"),
    path("review/", views.review_queue, name="review_queue"),
    path("overrides/<int:pk>/regret", views.override_regret, name="override_regret"),
    path("overrides/<int:pk>/confirm", views.override_confirm, name="override_confirm"),
    path("flags/<int:pk>/review", views.flag_review, name="flag_review"),
    path("proposals/<int:pk>/decide", views.proposal_decide, name="proposal_decide"),
]
page_urlpatterns: list[Any] = [path("trust/", include((_pages, "trust")))]
