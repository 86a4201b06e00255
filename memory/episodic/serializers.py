from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory.consolidation.services import SUPERSEDES_MAX, Consolidation
from memory.episodic.bulk import (
    BULK_MAX_MEMORIES,
    BULK_SAMPLE_IDS,
    BulkChanges,
    BulkOutcome,
    BulkSelection,
)
from memory.episodic.history import TRACKED_FIELDS
from memory.episodic.services import MEMORY_REASON_MAX_CHARS, MemoryDraft
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
            "valid_from",
            "valid_until",
            "superseded_by",
        ]
        read_only_fields = fields


class SupersessionCandidateSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField(help_text="The older memory's id.")
    content = serializers.CharField()
    similarity = serializers.FloatField(
        allow_null=True, help_text="Cosine to the new memory; null for an explicit id."
    )
    reason = serializers.CharField(
        help_text='"explicit", or what found it: "rule: shared: invoice", "model: UPDATE".'
    )
    applied = serializers.BooleanField(
        help_text="Superseded now; false: only proposed (CONSOLIDATION_MODE=propose)."
    )


class ConsolidationSerializer(serializers.Serializer[Any]):
    mode = serializers.ChoiceField(choices=["off", "propose", "apply"])
    decision = serializers.ChoiceField(
        choices=["add", "supersede", "ignore"],
        help_text="add: a fact of its own; supersede: it replaces older memories; ignore: it "
        "repeats one (it is stored all the same).",
    )
    decided_by = serializers.CharField(
        help_text='"rule", "model", "explicit", or empty when nothing was looked for.'
    )
    model_error = serializers.CharField(
        help_text="Why the model's answer was not used (the rule decided); empty otherwise."
    )


class MemoryStoredSerializer(MemorySerializer):
    """A memory as a write answers it: with what it superseded or would supersede."""

    supersedes = serializers.SerializerMethodField()
    supersession_candidates = serializers.SerializerMethodField()
    consolidation = serializers.SerializerMethodField()

    class Meta(MemorySerializer.Meta):
        fields = [
            *MemorySerializer.Meta.fields,
            "supersedes",
            "supersession_candidates",
            "consolidation",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_supersedes(self, memory: Memory) -> list[int]:
        return memory.consolidation.supersedes if memory.consolidation else []

    @extend_schema_field(SupersessionCandidateSerializer(many=True))
    def get_supersession_candidates(self, memory: Memory) -> list[dict[str, Any]]:
        found = memory.consolidation.candidates if memory.consolidation else ()
        return [SupersessionCandidateSerializer(c).data for c in found]

    @extend_schema_field(ConsolidationSerializer)
    def get_consolidation(self, memory: Memory) -> dict[str, Any]:
        plan = memory.consolidation or Consolidation(mode="off")
        return dict(ConsolidationSerializer(plan).data)


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
    valid_from = serializers.DateTimeField(
        required=False, help_text="From when the fact holds; occurred_at by default."
    )
    valid_until = serializers.DateTimeField(
        required=False, help_text="Until when it holds, when known (a later memory may end it)."
    )
    supersedes = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        required=False,
        default=list,
        max_length=SUPERSEDES_MAX,
        help_text="Ids of the agent's older memories this one replaces: their validity ends "
        "where this one's begins, and default search leaves them out.",
    )

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
            valid_from=data.get("valid_from"),
            valid_until=data.get("valid_until"),
            supersedes=tuple(data["supersedes"]),
        )


class MemoryStoreSerializer(MemoryInputSerializer):
    agent = serializers.CharField(
        max_length=200, required=False, help_text="Agent name; implied by an agent-scoped key."
    )


class MemoryBatchSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(max_length=200, required=False)
    memories = MemoryInputSerializer(many=True, allow_empty=False)
    defer_consolidation = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text=(
            "Judge the memories' older neighbours after the store, in the background "
            "(consolidation.decision is then `deferred`; what is found is applied, or under "
            "propose recorded in each memory's history). Explicit `supersedes` are applied "
            "either way. Default: CONSOLIDATION_DEFER_BATCHES for batches of more than one."
        ),
    )


class MemorySupersedeSerializer(serializers.Serializer[Any]):
    supersedes = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        allow_empty=False,
        max_length=SUPERSEDES_MAX,
        help_text="Ids of the agent's memories this memory replaces.",
    )


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
