from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import serializers

from ledger.models import Agent, ApiKey, Role


class AgentSerializer(serializers.ModelSerializer[Agent]):
    name = serializers.CharField(max_length=200, trim_whitespace=True)

    class Meta:
        model = Agent
        fields = [
            "id",
            "name",
            "model",
            "primary_role",
            "created_at",
            "rounds_participated",
            "probation_until",
            "trust_score",
        ]
        read_only_fields = ["id", "created_at", "rounds_participated", "trust_score"]
        # Uniqueness is the service's to report (409 agent_name_taken), not the serializer's 400.
        validators: list[Any] = []


class TenantAgentField(serializers.SlugRelatedField[Agent]):
    """An agent named in a request body, looked up only among the caller's tenant's agents, so
    another tenant's agent reads as "does not exist"."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="name", **kwargs)

    def get_queryset(self) -> QuerySet[Agent]:
        tenant = self.context.get("tenant")
        return Agent.objects.filter(tenant=tenant) if tenant else Agent.objects.none()


class ApiKeySerializer(serializers.ModelSerializer[ApiKey]):
    agent = TenantAgentField(required=False, allow_null=True)
    role = serializers.ChoiceField(choices=Role.choices, default=Role.AGENT)

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "role",
            "agent",
            "created_at",
            "last_used_at",
            "revoked_at",
        ]
        read_only_fields = ["id", "prefix", "created_at", "last_used_at", "revoked_at"]


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="The secret. Shown once, never again.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
