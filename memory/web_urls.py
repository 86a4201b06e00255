"""The memory app's pages (server-rendered, HTMX partials)."""

from __future__ import annotations

from django.urls import URLPattern, path

from memory import views

app_name = "memory"

urlpatterns: list[URLPattern] = [
    path("", views.explorer, name="explorer"),
    path("token-savings/", views.token_savings, name="token_savings"),
]
