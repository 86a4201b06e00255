from __future__ import annotations

from typing import Any

from rest_framework import serializers

from memory.episodic.bulk import (
    BULK_MAX_MEMORIES,
    BULK_SAMPLE_IDS,
    BulkChanges,
    BulkOutcome,
    BulkSelection,
)
from memory.episodic.services import MemoryDraft
from memory.models import Memory, MemoryRole
from memory.search.filters import MemoryFilter, filter_parse
from memory.search.serializers import MemoryFilterField


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


# --- Bulk operations (memory.episodic.bulk) -----------------------------------------------------


class MemoryBulkSelectionSerializer(serializers.Serializer[Any]):
    """Which of one agent's memories: ids, a filter, or all (with confirm)."""

    agent = serializers.CharField(
        max_length=200, required=False, help_text="Agent name; implied by an agent-scoped key."
    )
    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        required=False,
        help_text=f"At most {BULK_MAX_MEMORIES}; ids that are not the agent's are listed in "
        "not_found.",
    )
    filter = MemoryFilterField(required=False, help_text="docs/filters.md")
    all = serializers.BooleanField(
        required=False, default=False, help_text="Every memory of the agent (needs confirm)."
    )
    session_id = serializers.CharField(
        max_length=200, required=False, help_text="With all: every memory of this session."
    )
    confirm = serializers.BooleanField(required=False, default=False)
    dry_run = serializers.BooleanField(
        required=False, default=False, help_text="Count and sample, change nothing."
    )
    limit = serializers.IntegerField(
        required=False,
        default=BULK_MAX_MEMORIES,
        help_text=f"Memories this request handles, at most {BULK_MAX_MEMORIES}, in id order.",
    )
    after = serializers.IntegerField(
        required=False, help_text="Continue after this id (an earlier answer's continue_after)."
    )

    def validate_filter(self, value: Any) -> MemoryFilter:
        return filter_parse(value)

    def selection(self) -> BulkSelection:
        data = self.validated_data
        return BulkSelection(
            ids=tuple(dict.fromkeys(data.get("ids", ()))),
            filter=data.get("filter", MemoryFilter()),
            everything=data["all"],
            session_id=data.get("session_id"),
            confirm=data["confirm"],
            after=data.get("after"),
            limit=data["limit"],
        )


class MemoryBulkChangesSerializer(serializers.Serializer[Any]):
    importance = serializers.FloatField(required=False, min_value=0.0, max_value=1.0)
    tags_add = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, max_length=50
    )
    tags_remove = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, max_length=50
    )
    metadata_merge = serializers.DictField(
        required=False, help_text="Keys set in each memory's metadata (the others stay)."
    )
    metadata_remove = serializers.ListField(
        child=serializers.CharField(max_length=200), required=False, max_length=50
    )
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="null: never expires."
    )


class MemoryBulkUpdateSerializer(MemoryBulkSelectionSerializer):
    changes = MemoryBulkChangesSerializer()

    def changes_asked(self) -> BulkChanges:
        data = self.validated_data["changes"]
        return BulkChanges(
            importance=data.get("importance"),
            tags_add=tuple(data.get("tags_add", ())),
            tags_remove=tuple(data.get("tags_remove", ())),
            metadata_merge=dict(data.get("metadata_merge", {})),
            metadata_remove=tuple(data.get("metadata_remove", ())),
            expires_at=data.get("expires_at"),
            set_expires_at="expires_at" in data,
        )


class MemoryBulkDeleteSerializer(MemoryBulkSelectionSerializer):
    reason = serializers.CharField(
        max_length=500, required=False, default="", help_text="Kept in each deletion's event."
    )


class MemoryBulkResultSerializer(serializers.Serializer[BulkOutcome]):
    dry_run = serializers.BooleanField()
    matched = serializers.IntegerField(help_text="Memories the selection holds (after 'after').")
    done = serializers.IntegerField(help_text="Memories changed or deleted by this request.")
    ids = serializers.ListField(
        child=serializers.IntegerField(),
        help_text=f"Those; in a dry run, up to {BULK_SAMPLE_IDS} that would be.",
    )
    not_found = serializers.ListField(child=serializers.IntegerField())
    remaining = serializers.IntegerField(help_text="Matched but left for the next request.")
    continue_after = serializers.IntegerField(
        allow_null=True, help_text="Send as 'after' to go on; null when nothing remains."
    )
