from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
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
from ledger.names import agent_name_key, agent_name_problem, name_normal_form


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin[Tenant]):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]


class AgentAdminForm(forms.ModelForm[Agent]):
    """The services' name rule, reported on the form instead of as a failed save."""

    class Meta:
        model = Agent
        fields = ["tenant", "name", "model", "primary_role", "probation_until"]

    def clean_name(self) -> str:
        name = name_normal_form(str(self.cleaned_data["name"]))
        problem = agent_name_problem(name)
        if problem is not None:
            raise forms.ValidationError(f"The name {name!r} {problem.message}", code=problem.reason)
        return name

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant = cleaned.get("tenant") or getattr(self.instance, "tenant", None)
        name = cleaned.get("name")
        if tenant is not None and name:
            holder = (
                Agent.objects.filter(tenant=tenant, name_key=agent_name_key(name))
                .exclude(pk=self.instance.pk)
                .first()
            )
            if holder is not None:
                self.add_error(
                    "name",
                    f"This tenant already has an agent named '{holder.name}' "
                    "(names that differ only in case or in look-alike characters are the same).",
                )
        return cleaned


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin[Agent]):
    """Agents are created, changed and deleted through the agent services, so each change is a
    ledger event (a rebuild of the agents projection would otherwise undo it) and passes the
    name rule."""

    form = AgentAdminForm
    list_display = ["name", "tenant", "primary_role", "model", "trust_score", "probation_until"]
    list_filter = ["tenant", "primary_role"]
    search_fields = ["name", "model"]
    readonly_fields = ["trust_score", "rounds_participated", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> list[str]:
        # An agent never moves to another tenant: its memories and keys stay where they are.
        return [*self.readonly_fields, *(["tenant"] if obj is not None else [])]

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        # Imported here: the admin loads while the apps do, before DRF's settings have imported
        # ledger.auth, and ledger.services imported now would close that cycle half-way.
        from ledger import services

        actor = services.actor_for_user(request.user)  # type: ignore[arg-type]
        fields = {
            name: form.cleaned_data[name]
            for name in services.AGENT_EDITABLE_FIELDS
            if name in form.cleaned_data
        }
        if change:
            stored = Agent.objects.get(pk=obj.pk)
            changes = {name: value for name, value in fields.items() if name in form.changed_data}
            saved = services.agent_update(agent=stored, actor=actor, changes=changes)
        else:
            saved = services.agent_create(tenant=obj.tenant, actor=actor, **fields)
        obj.pk, obj.name, obj.name_key = saved.pk, saved.name, saved.name_key

    # A bare cascade would leave the memories' keys behind and the ledger without the
    # agent.deleted a rebuild replays.
    def delete_model(self, request: HttpRequest, obj: Agent) -> None:
        self.delete_queryset(request, Agent.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        from ledger import services  # imported here, as in save_model

        actor = services.actor_for_user(request.user)  # type: ignore[arg-type]
        for agent in queryset.select_related("tenant"):
            services.agent_delete(agent=agent, actor=actor)


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
    """Seats are granted, changed and removed through the seat services, so each change here is
    a ledger event as on the People page; whose seat in which tenant is fixed once made."""

    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["tenant", "role"]

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> list[str]:
        return ["tenant", "user"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        from ledger import services  # imported here, as in AgentAdmin.save_model
        from ledger.people import services as people

        actor = services.actor_for_user(request.user)  # type: ignore[arg-type]
        with _refusal_as_message(self, request):
            if change:
                saved = people.membership_role_change(
                    membership=Membership.objects.get(pk=obj.pk), role=obj.role, actor=actor
                )
            else:
                saved = people.membership_grant(
                    tenant=obj.tenant, user=obj.user, role=obj.role, actor=actor
                )
            obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        self.delete_queryset(request, Membership.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        from ledger import services  # imported here, as in save_model
        from ledger.people import services as people

        actor = services.actor_for_user(request.user)  # type: ignore[arg-type]
        for seat in queryset.select_related("tenant", "user"):
            with _refusal_as_message(self, request):
                people.membership_remove(membership=seat, actor=actor)


@contextmanager
def _refusal_as_message(model_admin: Any, request: HttpRequest) -> Iterator[None]:
    """A service's refusal (the tenant's last admin) shown as the admin's error message; the
    admin then still says "changed successfully", so the message says what did not happen."""
    from config.api import ApiError

    try:
        yield
    except ApiError as refused:
        model_admin.message_user(request, f"Not saved: {refused.detail}", level=messages.ERROR)


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
