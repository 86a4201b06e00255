"""The jobs page (each periodic job's last runs and next due time)."""

from __future__ import annotations

from django.urls import URLPattern, path

from ledger import views

app_name = "jobs"

urlpatterns: list[URLPattern] = [
    path("", views.jobs_status, name="status"),
]
