from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from ledger.models import (
    Agent,
    ApiKey,
    Event,
    IdempotencyRecord,
    JobRun,
    Membership,
    RecallSettings,
    Tenant,
)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin[Tenant]):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin[Agent]):
    list_display = ["name", "tenant", "primary_role", "model", "trust_score", "probation_until"]
    list_filter = ["tenant", "primary_role"]
    search_fields = ["name", "model"]
    readonly_fields = ["trust_score", "rounds_participated", "created_at"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[ApiKey]):
    """Keys are created with the management command or the API (the secret is shown once there);
    here they can be inspected and revoked. Whose key it is (tenant, agent) is fixed at creation;
    an admin role on an agent-scoped key is refused by the model's constraint."""

    list_display = ["prefix", "name", "tenant", "role", "agent", "last_used_at", "revoked_at"]
    list_filter = ["tenant", "role"]
    search_fields = ["prefix", "name"]
    readonly_fields = [
        "tenant",
        "agent",
        "prefix",
        "key_hash",
        "created_at",
        "created_by",
        "last_used_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin[Membership]):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["tenant", "role"]


@admin.register(Event)
class EventAdmin(admin.ModelAdmin[Event]):
    """Read-only: the database refuses changes to events anyway; the admin does not offer them."""

    list_display = ["seq", "tenant", "kind", "actor", "run_id", "turn", "created_at"]
    list_filter = ["tenant", "kind"]
    search_fields = ["run_id", "round_id", "actor", "kind"]
    ordering = ["tenant", "-seq"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(RecallSettings)
class RecallSettingsAdmin(admin.ModelAdmin[RecallSettings]):
    list_display = ["tenant", "weight_relevance", "weight_recency", "weight_importance", "top_k"]


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(admin.ModelAdmin[IdempotencyRecord]):
    """Stored answers to retried POSTs; inspectable, not editable."""

    list_display = ["key", "tenant", "status_code", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["key"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(JobRun)
class JobRunAdmin(admin.ModelAdmin[JobRun]):
    """The record of what the background jobs did: written by the jobs, read-only here.

    Schedules are edited under "Periodic tasks" (django-celery-beat)."""

    list_display = ["job", "status", "started_at", "duration_seconds", "rows_touched", "error"]
    list_filter = ["job", "status"]
    readonly_fields = [field.name for field in JobRun._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
