from __future__ import annotations

from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        import config.checks  # noqa: F401 (registers the start-up checks)
        import ledger.key_cache  # noqa: F401 (forgets verified keys when one changes)
        from ledger.agent_projection import AgentProjection
        from ledger.jobs import CHAIN_VERIFY, CHECKPOINT, IDEMPOTENCY_EXPIRY, job_register
        from ledger.projections import projection_register, service_kinds_register

        projection_register(AgentProjection())
        job_register(CHAIN_VERIFY, CHECKPOINT, IDEMPOTENCY_EXPIRY)
        service_kinds_register(
            "tenant.created",
            "membership.granted",
            "membership.role_changed",
            "membership.removed",
            "api_key.created",
            "api_key.revoked",
            "api_key.role_changed",  # ledger/migrations/0009_api_key_admin_is_tenant_wide.py
            "recall_settings.updated",
            "job_schedule.updated",
        )

        # DRF's generic classes are typed in its stubs but not subscriptable at run time.
        import django_stubs_ext
        from rest_framework import fields, generics, serializers, viewsets

        django_stubs_ext.monkeypatch(
            extra_classes=[
                serializers.BaseSerializer,
                serializers.Serializer,
                serializers.ModelSerializer,
                serializers.ListSerializer,
                fields.Field,
                serializers.RelatedField,
                generics.GenericAPIView,
                viewsets.GenericViewSet,
            ]
        )
