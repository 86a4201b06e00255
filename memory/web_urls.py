"""The memory app's pages (server-rendered, HTMX partials)."""

from __future__ import annotations

from django.urls import URLPattern

app_name = "memory"

urlpatterns: list[URLPattern] = []
