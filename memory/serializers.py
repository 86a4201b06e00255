from __future__ import annotations

from typing import Any

from rest_framework import serializers

from memory.models import Memory, MemoryRole
from memory.services import MemoryDraft


class AgentRunSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(
        max_length=200,
        required=False,
        help_text="Agent name. An agent-scoped key may omit it (it recalls as itself).",
    )
    run_id = serializers.CharField(max_length=200)


class RecallRequestSerializer(AgentRunSerializer):
    mode = serializers.ChoiceField(choices=["episodic", "salience"], default="episodic")
    query = serializers.CharField(required=False, default="", allow_blank=True, max_length=10000)
    current_turn = serializers.IntegerField(required=False, min_value=0)
    top_k = serializers.IntegerField(required=False, min_value=1, max_value=200)
    max_recent = serializers.IntegerField(required=False, min_value=1, max_value=200)


class RecallItemSerializer(serializers.Serializer[Any]):
    seq = serializers.IntegerField()
    turn = serializers.IntegerField()
    kind = serializers.CharField()
    actor = serializers.CharField()
    text = serializers.CharField()
    score = serializers.FloatField(allow_null=True)
    relevance = serializers.FloatField(allow_null=True)
    recency = serializers.FloatField(allow_null=True)
    importance = serializers.FloatField(allow_null=True)


class RecallResultSerializer(serializers.Serializer[Any]):
    mode = serializers.CharField()
    agent = serializers.CharField()
    run_id = serializers.CharField()
    prompt = serializers.CharField(help_text="The recalled lines, ready for a prompt.")
    semantic = serializers.BooleanField(help_text="Whether relevance came from the semantic index.")
    semantic_note = serializers.CharField()
    weights = serializers.DictField(child=serializers.FloatField())
    items = RecallItemSerializer(many=True)


class ReflectionRequestSerializer(AgentRunSerializer):
    force = serializers.BooleanField(default=False, help_text="Reflect even if none is due.")


class ReflectionResultSerializer(serializers.Serializer[Any]):
    created = serializers.BooleanField()
    qualifying_events = serializers.IntegerField()
    reflections_made = serializers.IntegerField()
    threshold = serializers.IntegerField()
    event = serializers.DictField(allow_null=True)


MAX_BATCH = 1000


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

    def validate_memories(self, memories: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(memories) > MAX_BATCH:
            raise serializers.ValidationError(f"A batch holds at most {MAX_BATCH} memories.")
        return memories


class MemoryHistorySerializer(serializers.Serializer[Any]):
    seq = serializers.IntegerField()
    kind = serializers.CharField()
    actor = serializers.CharField()
    created_at = serializers.DateTimeField()


class MemoryUpdateSerializer(serializers.Serializer[Any]):
    content = serializers.CharField(trim_whitespace=False, allow_blank=True, required=False)
    memory_type = serializers.CharField(max_length=32, required=False)
    importance = serializers.FloatField(required=False)
    metadata = serializers.DictField(required=False)
    tags = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, max_length=50
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
