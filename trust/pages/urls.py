"""Routes of the trust pages (trust.pages.views), under /trust/ in the ``trust`` namespace."""

from __future__ import annotations

from typing import Any

from django.urls import include, path

from trust.pages import review, views

_pages = [
    path("", views.overview, name="overview"),
    path("agents/<int:pk>/", views.agent_detail, name="agent"),
    path("agents/<int:pk>/export.json", views.agent_export, name="agent_export"),
    path("review/", views.review_queue, name="review_queue"),
    path("overrides/<int:pk>/revert", views.override_revert, name="override_revert"),
    path(
        "overrides/<int:pk>/revert/withdraw",
        views.override_revert_withdraw,
        name="override_revert_withdraw",
    ),
    path("overrides/<int:pk>/confirm", views.override_confirm, name="override_confirm"),
    # The review flow (trust.pages.review): the filtered list, bulk confirm, one at a time.
    path("review/overrides/", review.override_list, name="overrides"),
    path("review/overrides/confirm", review.overrides_confirm_bulk, name="overrides_confirm"),
    path("review/overrides/<int:pk>/", review.override_detail, name="override_detail"),
    path("review/overrides/<int:pk>/<str:step>", review.override_step, name="override_step"),
    path("flags/<int:pk>/review", views.flag_review, name="flag_review"),
    path("proposals/<int:pk>/decide", views.proposal_decide, name="proposal_decide"),
]
api_urlpatterns: list[Any] = []
page_urlpatterns: list[Any] = [path("trust/", include((_pages, "trust")))]
