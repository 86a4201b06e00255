from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers, status

from config.api import ApiError
from ledger.models import Agent, ApiKey, Event, RecallSettings, Role, displayable_text
from ledger.services import EventDraft


@extend_schema_field(OpenApiTypes.STR)
class AgentNameField(serializers.Field):  # type: ignore[type-arg]
    """Any string: the agent services check names (ledger.names), so that every refused name,
    one with a NUL or one too long included, answers the one code ``invalid_agent_name``."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise ApiError(
                code="invalid_agent_name",
                message="The agent name must be a string.",
                details={"reason": "not_a_string"},
            )
        return data

    def to_representation(self, value: Any) -> str:
        return str(value)


class AgentSerializer(serializers.ModelSerializer[Agent]):
    name = AgentNameField(
        help_text="Unique per tenant without regard to case or look-alike characters; one "
        "script, no hidden characters, no colon, not 'system'. Stored in NFKC form."
    )

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


class EventSerializer(serializers.ModelSerializer[Event]):
    """An event as the API shows it.

    An agent-scoped key sees the full payload of its own events only; of other actors' events
    it sees just the displayable text, since payloads may carry secrets under other keys.
    """

    payload = serializers.SerializerMethodField()

    class Meta:
        model = Event
        fields = [
            "seq",
            "run_id",
            "round_id",
            "turn",
            "actor",
            "kind",
            "payload",
            "created_at",
            "prev_hash",
            "hash",
        ]
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_payload(self, event: Event) -> dict[str, Any]:
        principal = self.context.get("principal")
        agent = getattr(principal, "agent", None)
        if agent is None or event.actor == agent.name:
            return dict(event.payload)
        text = displayable_text(event.payload, kind=event.kind)
        return {"text": text} if text else {}


class EventAppendSerializer(serializers.Serializer[EventDraft]):
    kind = serializers.CharField(max_length=200, help_text="Dotted lowercase, e.g. agent.spoke")
    actor = serializers.CharField(
        max_length=200,
        required=False,
        help_text="Agent name, 'system' or 'human:<name>'. An agent-scoped key acts as its agent.",
    )
    run_id = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    round_id = serializers.CharField(max_length=300, required=False, default="", allow_blank=True)
    turn = serializers.IntegerField(required=False, default=0)
    payload = serializers.DictField(required=False, default=dict)

    def to_draft(self, validated: dict[str, Any]) -> EventDraft:
        principal = self.context["principal"]
        actor = validated.get("actor")
        if principal.agent is not None:
            if actor not in (None, principal.agent.name):
                raise ApiError(
                    code="actor_mismatch",
                    message=f"This key acts as {principal.agent.name!r} and cannot append as "
                    f"{actor!r}.",
                    status_code=status.HTTP_403_FORBIDDEN,
                )
            actor = principal.agent.name
        elif actor is None:
            raise serializers.ValidationError({"actor": ["This field is required."]})
        return EventDraft(
            kind=validated["kind"],
            actor=actor,
            payload=validated["payload"],
            run_id=validated["run_id"],
            round_id=validated["round_id"],
            turn=validated["turn"],
        )


class EventBatchSerializer(serializers.Serializer[list[EventDraft]]):
    events = EventAppendSerializer(many=True, allow_empty=False)

    def validate_events(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(events) > settings.LEDGER_MAX_BATCH:
            raise serializers.ValidationError(
                f"A batch holds at most {settings.LEDGER_MAX_BATCH} events."
            )
        return events


class ChainReportSerializer(serializers.Serializer[Any]):
    ok = serializers.BooleanField()
    code = serializers.CharField(
        help_text="Empty when ok; else event_missing, link_broken, hash_mismatch, "
        "checkpoint_mismatch, ledger_truncated or checkpoint_invalid (docs/ledger.md)."
    )
    events_checked = serializers.IntegerField()
    first_broken_seq = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()
    head_seq = serializers.IntegerField(help_text="The last event verified.")
    head_hash = serializers.CharField()
    checkpoint_seq = serializers.IntegerField(
        allow_null=True, help_text="The newest signed checkpoint the chain was held against."
    )
    checkpoint_at = serializers.DateTimeField(allow_null=True)


class ReceiptVerifySerializer(serializers.Serializer[Any]):
    receipt = serializers.CharField(
        max_length=200,
        help_text="A Ledger-Receipt header value: <tenant>:<seq>:<hash>.",
    )


class ReceiptReportSerializer(serializers.Serializer[Any]):
    ok = serializers.BooleanField()
    receipt = serializers.CharField()
    code = serializers.CharField(
        help_text="Empty when ok; else receipt_mismatch, ledger_truncated, or the code of the "
        "first break in the chain up to the receipt's event."
    )
    reason = serializers.CharField()


def _kinds_field(help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.RegexField(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$", max_length=64),
        max_length=200,
        help_text=help_text,
    )


class RecallSettingsSerializer(serializers.ModelSerializer[RecallSettings]):
    globally_visible_kinds = _kinds_field("Kinds every agent sees, besides its own events.")
    reflection_kinds = _kinds_field("Kinds that count toward reflection, besides its own events.")
    kind_importance = serializers.DictField(
        child=serializers.FloatField(min_value=0.0, max_value=1.0),
        help_text="Importance (0..1) by event kind; others take default_importance.",
    )
    default_importance = serializers.FloatField(min_value=0.0, max_value=1.0)
    weight_relevance = serializers.FloatField(min_value=0.0, max_value=1.0)
    weight_recency = serializers.FloatField(min_value=0.0, max_value=1.0)
    weight_importance = serializers.FloatField(min_value=0.0, max_value=1.0)
    recency_decay = serializers.FloatField(min_value=0.0, max_value=10.0)
    max_recent = serializers.IntegerField(min_value=1, max_value=200)
    top_k = serializers.IntegerField(min_value=1, max_value=200)
    reflection_threshold = serializers.IntegerField(min_value=1, max_value=10_000)

    class Meta:
        model = RecallSettings
        exclude = ["id", "tenant"]
