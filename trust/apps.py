from __future__ import annotations

from django.apps import AppConfig


class TrustConfig(AppConfig):
    name = "trust"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ledger.projections import projection_register
        from trust.projection import TrustProjection

        projection_register(TrustProjection())
