from __future__ import annotations

from django.apps import AppConfig


class TrustConfig(AppConfig):
    name = "trust"
    default_auto_field = "django.db.models.BigAutoField"
