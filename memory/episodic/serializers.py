from __future__ import annotations

from typing import Any

from rest_framework import serializers

from memory.episodic.history import TRACKED_FIELDS
from memory.episodic.services import MEMORY_REASON_MAX_CHARS, MemoryDraft
from memory.models import Memory, MemoryRole


class MemorySerializer(serializers.ModelSerializer[Memory]):
    agent = serializers.CharField(source="agent.name", read_only=True)

    class Meta:
        model = Memory
        fields = [
            "id",
            "agent",
            "session_id",
            "role",
            "content",
            "memory_type",
            "importance",
            "metadata",
            "tags",
            "occurred_at",
            "created_at",
            "updated_at",
            "expires_at",
            "last_retrieved_at",
            "retrieval_count",
            "archived_at",
        ]
        read_only_fields = fields


class MemoryInputSerializer(serializers.Serializer[MemoryDraft]):
    content = serializers.CharField(trim_whitespace=False, allow_blank=True)
    role = serializers.ChoiceField(choices=MemoryRole.choices, default=MemoryRole.USER)
    session_id = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    memory_type = serializers.CharField(max_length=32, required=False)
    importance = serializers.FloatField(required=False)
    metadata = serializers.DictField(required=False, default=dict)
    tags = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, default=list, max_length=50
    )
    expires_at = serializers.DateTimeField(required=False)
    occurred_at = serializers.DateTimeField(required=False)
    embedding = serializers.ListField(child=serializers.FloatField(), required=False)

    def to_draft(self, data: dict[str, Any]) -> MemoryDraft:
        return MemoryDraft(
            content=data["content"],
            role=data["role"],
            session_id=data["session_id"],
            memory_type=data.get("memory_type"),
            importance=data.get("importance"),
            metadata=data["metadata"],
            tags=data["tags"],
            expires_at=data.get("expires_at"),
            occurred_at=data.get("occurred_at"),
            embedding=data.get("embedding"),
        )


class MemoryStoreSerializer(MemoryInputSerializer):
    agent = serializers.CharField(
        max_length=200, required=False, help_text="Agent name; implied by an agent-scoped key."
    )


class MemoryBatchSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(max_length=200, required=False)
    memories = MemoryInputSerializer(many=True, allow_empty=False)


class MemoryHistoryValuesSerializer(serializers.Serializer[Any]):
    """The values of the fields a change touched; content and metadata are null once shredded."""

    content = serializers.CharField(required=False, allow_null=True)
    metadata = serializers.DictField(required=False, allow_null=True)
    memory_type = serializers.CharField(required=False)
    importance = serializers.FloatField(required=False)
    tags = serializers.ListField(child=serializers.CharField(), required=False)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    archived_at = serializers.DateTimeField(required=False, allow_null=True)
    valid_from = serializers.DateTimeField(required=False, allow_null=True)
    valid_until = serializers.DateTimeField(required=False, allow_null=True)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        # Only the fields the change touched: an absent field is unchanged, a null one empty.
        return {
            name: None if instance[name] is None else self.fields[name].to_representation(value)
            for name, value in instance.items()
        }


class MemoryHistorySerializer(serializers.Serializer[Any]):
    seq = serializers.IntegerField()
    kind = serializers.CharField()
    created_at = serializers.DateTimeField()
    actor = serializers.CharField()
    actor_kind = serializers.ChoiceField(
        choices=["agent", "person", "api_key", "system"],
        help_text="Who made the change: an agent, a person, a tenant-wide API key or a job.",
    )
    job = serializers.CharField(
        allow_null=True, help_text='The system job that made it: "decay", "quota" or "ttl".'
    )
    reason = serializers.CharField(
        allow_blank=True, help_text="The reason or note the write carried (kept in the clear)."
    )
    changed = serializers.ListField(
        child=serializers.ChoiceField(choices=list(TRACKED_FIELDS)),
        help_text="The fields the change touched, as listed in before and after.",
    )
    before = MemoryHistoryValuesSerializer()
    after = MemoryHistoryValuesSerializer()
    content_shredded = serializers.BooleanField(
        help_text="The memory was deleted or expired: its content key is destroyed, and its "
        "content and metadata read as null in every entry."
    )


class MemoryUpdateSerializer(serializers.Serializer[Any]):
    content = serializers.CharField(trim_whitespace=False, allow_blank=True, required=False)
    memory_type = serializers.CharField(max_length=32, required=False)
    importance = serializers.FloatField(required=False)
    metadata = serializers.DictField(required=False)
    tags = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, max_length=50
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    reason = serializers.CharField(
        max_length=MEMORY_REASON_MAX_CHARS,
        required=False,
        allow_blank=True,
        help_text="Why it changes: kept in the clear in the ledger and shown by the history.",
    )
