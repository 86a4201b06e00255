"""The ledger app's pages (server-rendered, HTMX partials)."""

from __future__ import annotations

from django.urls import URLPattern, path

from ledger import views

app_name = "ledger"

urlpatterns: list[URLPattern] = [
    path("", views.ledger_browser, name="browser"),
]
