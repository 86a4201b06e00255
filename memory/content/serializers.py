"""Request and response shapes of the content store API (``memory.content.api``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory.content.selectors import TRANSFORMS, RunSavings
from memory.content.services import ItemDraft
from memory.models import ContentItem, ContentItemType, ContentScope, ContentSnapshot

MAX_TAGS = 50
MAX_RELATED = 100
MAX_SNAPSHOT_ITEMS = 1000

_AGENT_HELP = "Agent name; an agent-scoped key may omit it (it acts as itself)."


class _Metadata(serializers.Serializer[ItemDraft]):
    # The metaclass moves declared fields out of the class, so shadowing Field.source and
    # Field.label is harmless at run time; only the type checker sees a clash.
    source = serializers.CharField(  # type: ignore[assignment]
        max_length=200, required=False, default="", allow_blank=True
    )
    timestamp = serializers.DateTimeField(
        required=False, help_text="When the content was produced; default: now."
    )
    tags = serializers.ListField(
        child=serializers.CharField(max_length=100), default=list, max_length=MAX_TAGS
    )
    related_to = serializers.ListField(
        child=serializers.CharField(max_length=16),
        default=list,
        max_length=MAX_RELATED,
        help_text="Ids of related items of this tenant.",
    )


class ContentStoreSerializer(_Metadata):
    agent = serializers.CharField(max_length=200, required=False, help_text=_AGENT_HELP)
    content = serializers.JSONField(help_text="Text, or any JSON value (kept as JSON).")
    type = serializers.ChoiceField(choices=ContentItemType.choices, default=ContentItemType.CUSTOM)
    scope = serializers.ChoiceField(
        choices=ContentScope.choices,
        required=False,
        help_text="'run' (needs run_id) or 'agent'; default: 'run' when run_id is given.",
    )
    run_id = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)

    def to_draft(self) -> ItemDraft:
        data = self.validated_data
        return ItemDraft(
            content=data["content"],
            item_type=data["type"],
            scope=data.get("scope", ""),
            run_id=data["run_id"],
            source=data["source"],
            timestamp=data.get("timestamp"),
            tags=data["tags"],
            related_to=data["related_to"],
        )


class ContentItemSerializer(serializers.ModelSerializer[ContentItem]):
    """An item's metadata; never its content."""

    id = serializers.CharField(source="key")
    type = serializers.CharField(source="item_type")
    agent = serializers.CharField(source="agent.name")

    class Meta:
        model = ContentItem
        fields = [
            "id",
            "type",
            "format",
            "scope",
            "run_id",
            "agent",
            "source",
            "timestamp",
            "size",
            "content_hash",
            "tags",
            "related_to",
            "action_type",
            "rendering",
            "tokens_full",
            "tokens_returned",
            "created_at",
        ]
        read_only_fields = fields


class ContentRetrievalSerializer(serializers.Serializer[Any]):
    item = ContentItemSerializer()
    transform = serializers.ChoiceField(choices=TRANSFORMS)
    content = serializers.JSONField(help_text="The item rendered by the transform.")
    details = serializers.DictField(help_text="What the transform did (range, n, unit, ...).")


class ActionResultSerializer(_Metadata):
    agent = serializers.CharField(max_length=200, required=False, help_text=_AGENT_HELP)
    run_id = serializers.CharField(max_length=200)
    action_type = serializers.CharField(max_length=200, help_text="e.g. 'web.fetch', 'sql.query'")
    result = serializers.JSONField(help_text="The action's result: text or any JSON value.")
    type = serializers.ChoiceField(
        choices=ContentItemType.choices, default=ContentItemType.ACTION_RESULT
    )
    goal = serializers.CharField(
        max_length=2000,
        required=False,
        default="",
        allow_blank=True,
        help_text="What the agent is after; only the optional LLM compactor reads it.",
    )

    def to_draft(self) -> ItemDraft:
        data = self.validated_data
        return ItemDraft(
            content=data["result"],
            item_type=data["type"],
            source=data["source"] or data["action_type"],
            timestamp=data.get("timestamp"),
            tags=data["tags"],
            related_to=data["related_to"],
        )


class ActionResultAnswerSerializer(serializers.Serializer[Any]):
    item = ContentItemSerializer()
    first_time = serializers.BooleanField(
        help_text="The first result of this action type in the agent's run: returned in full."
    )
    conversation = serializers.CharField(help_text="What to put into the conversation.")
    summary = serializers.DictField(allow_null=True, help_text="The compaction, when compacted.")
    retrieve = serializers.DictField(help_text="How to fetch the full content.")
    tokens = serializers.DictField(help_text="{full, returned}: tokens of both renderings.")


class ContentClearSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(max_length=200, required=False, help_text=_AGENT_HELP)
    scope = serializers.ChoiceField(choices=ContentScope.choices, default=ContentScope.RUN)
    run_id = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)


class RunSavingsSerializer(serializers.Serializer[RunSavings]):
    run_id = serializers.CharField()
    action_results = serializers.IntegerField()
    full_renderings = serializers.IntegerField()
    compacted_renderings = serializers.IntegerField()
    tokens_full = serializers.IntegerField()
    tokens_returned = serializers.IntegerField()
    tokens_saved = serializers.IntegerField()
    saved_ratio = serializers.FloatField()


class SnapshotCreateSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(
        max_length=200, required=False, help_text="The owner; " + _AGENT_HELP
    )
    item_ids = serializers.ListField(
        child=serializers.CharField(max_length=16), default=list, max_length=MAX_SNAPSHOT_ITEMS
    )
    run_id = serializers.CharField(
        max_length=200, required=False, help_text="Also take every current item of this run."
    )
    grantee = serializers.CharField(
        max_length=200,
        required=False,
        help_text="The sub-agent it is for; omitted: any agent of the tenant with its id.",
    )
    label = serializers.CharField(  # type: ignore[assignment]
        max_length=200, required=False, default="", allow_blank=True
    )


class SnapshotSerializer(serializers.ModelSerializer[ContentSnapshot]):
    id = serializers.CharField(source="key")
    owner = serializers.CharField(source="owner.name")
    grantee = serializers.CharField(source="grantee.name", allow_null=True, default=None)
    items = serializers.SerializerMethodField()

    class Meta:
        model = ContentSnapshot
        fields = ["id", "owner", "grantee", "label", "created_at", "items"]
        read_only_fields = fields

    @extend_schema_field(ContentItemSerializer(many=True))
    def get_items(self, snapshot: ContentSnapshot) -> list[dict[str, Any]]:
        from memory.content.selectors import snapshot_items

        items = snapshot_items(snapshot).defer("body").select_related("agent").order_by("id")
        return list(ContentItemSerializer(items, many=True).data)


class SnapshotRestoreSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(max_length=200, required=False, help_text=_AGENT_HELP)
    run_id = serializers.CharField(
        max_length=200,
        required=False,
        default="",
        allow_blank=True,
        help_text="The run to attach the items to; empty: the agent's own scope.",
    )
