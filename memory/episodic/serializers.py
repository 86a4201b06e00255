from __future__ import annotations

from typing import Any

from rest_framework import serializers

from memory.episodic.services import MemoryDraft
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
