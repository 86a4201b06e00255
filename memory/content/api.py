"""``/api/v1/content/...``: the content store (SPEC 7) over HTTP.

Items are addressed by their short id. An agent-scoped key reaches only its own agent's items
(and items restored into its scopes); another agent's item, another tenant's, a cleared one and
one that never existed all answer the same 404. A snapshot is read through
``GET /content/items/{id}/?snapshot=<snapshot id>``: no route writes through a snapshot.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import ApiError
from config.datetimes import client_datetime_parse
from ledger.models import Agent, Role
from ledger.scoping import TenantScopedViewSet
from memory.content.selectors import (
    TRANSFORMS,
    ItemCriteria,
    content_items_query,
    content_items_visible,
    content_run_savings,
    content_snapshots_visible,
    content_transform,
)
from memory.content.serializers import (
    ActionResultAnswerSerializer,
    ActionResultSerializer,
    ContentClearSerializer,
    ContentItemSerializer,
    ContentRetrievalSerializer,
    ContentStoreSerializer,
    RunSavingsSerializer,
    SnapshotCreateSerializer,
    SnapshotRestoreSerializer,
    SnapshotSerializer,
)
from memory.content.services import (
    RETRIEVE_URL,
    action_result_record,
    content_item_store,
    content_scope_clear,
    content_snapshot_create,
    content_snapshot_restore,
)
from memory.episodic.api import AgentActionViewSet, agent_for_caller
from memory.models import ContentItem, ContentSnapshot

MAX_QUERY_LIMIT = 500

_RETRIEVE_PARAMETERS = [
    OpenApiParameter("transform", str, enum=list(TRANSFORMS), description="Default: full."),
    OpenApiParameter("snapshot", str, description="Read through this snapshot's grant."),
    OpenApiParameter("start", int, description="excerpt: first character (default 0)"),
    OpenApiParameter("end", int, description="excerpt: character after the last"),
    OpenApiParameter("phrase", str, description="excerpt: around the first occurrence"),
    OpenApiParameter("context", int, description="excerpt: characters each side (200)"),
    OpenApiParameter("n", int, description="first_n / last_n: how many units"),
    OpenApiParameter("unit", str, enum=["lines", "items", "chars"]),
    OpenApiParameter("keys", str, description="filtered: comma-separated JSON keys to keep"),
    OpenApiParameter("match", str, description="filtered: keep lines containing this"),
    OpenApiParameter("pattern", str, description="filtered: keep lines matching this regex"),
]
_QUERY_PARAMETERS = [
    OpenApiParameter("type", str),
    OpenApiParameter("source", str),
    OpenApiParameter("tags", str, description="Comma-separated; items carrying all of them"),
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="timestamp >= since"),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="timestamp <= until"),
    OpenApiParameter("run_id", str, description="Items of the run, and items restored into it"),
    OpenApiParameter("agent", str, description="Agent name"),
    OpenApiParameter("scope", str, enum=["run", "agent"]),
    OpenApiParameter("limit", int, description=f"1-{MAX_QUERY_LIMIT}, default 50"),
]


def _datetime_param(params: Any, name: str) -> Any:
    raw = params.get(name)
    if not raw:
        return None
    parsed = client_datetime_parse(raw)
    if parsed is None:
        raise ApiError(
            code="invalid_parameter",
            message=f"{name!r} must be an ISO 8601 time, with an offset under 24 hours.",
        )
    return parsed


def _limit_param(params: Any) -> int:
    raw = params.get("limit") or "50"
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_QUERY_LIMIT:
        raise ApiError(
            code="invalid_parameter", message=f"'limit' must be between 1 and {MAX_QUERY_LIMIT}."
        )
    return int(raw)


@extend_schema_view(
    list=extend_schema(
        summary="Query content items (metadata only, newest first)",
        parameters=_QUERY_PARAMETERS,
        responses=ContentItemSerializer(many=True),
    ),
    retrieve=extend_schema(
        summary="Read a content item through a transform",
        parameters=_RETRIEVE_PARAMETERS,
        responses=ContentRetrievalSerializer,
    ),
    create=extend_schema(
        summary="Store a content item",
        request=ContentStoreSerializer,
        responses={201: ContentItemSerializer},
    ),
    clear=extend_schema(
        summary="Clear a run's or an agent's content (reads then answer 404)",
        request=ContentClearSerializer,
        responses={200: OpenApiTypes.OBJECT},
    ),
)
class ContentItemViewSet(TenantScopedViewSet):
    queryset = ContentItem.objects.select_related("agent").order_by("id")
    serializer_class = ContentItemSerializer
    write_role = Role.AGENT
    agent_bound_actions = frozenset({"list", "retrieve", "create", "clear"})
    lookup_field = "key"
    lookup_url_kwarg = "id"
    pagination_class = None

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        snapshot_key = self.request.query_params.get("snapshot")
        if self.action == "retrieve" and snapshot_key:
            snapshot = content_snapshots_visible(
                tenant=self.tenant, agent=self.principal.agent
            ).filter(key=snapshot_key)
            return queryset.filter(snapshots__in=snapshot, cleared_at__isnull=True)
        return content_items_visible(items=queryset, agent=self.principal.agent)

    def list(self, request: Request) -> Response:
        params = request.query_params
        tags = [tag for tag in params.get("tags", "").split(",") if tag]
        criteria = ItemCriteria(
            item_type=params.get("type", ""),
            source=params.get("source", ""),
            tags=tags,
            since=_datetime_param(params, "since"),
            until=_datetime_param(params, "until"),
            run_id=params.get("run_id"),
            agent_name=params.get("agent", ""),
            scope=params.get("scope", ""),
            limit=_limit_param(params),
        )
        items = content_items_query(
            items=self.get_queryset(), criteria=criteria, caller=self.principal.agent
        )
        return Response(self.get_serializer(items, many=True).data)

    def retrieve(self, request: Request, id: str | None = None) -> Response:
        item = self.get_object()
        params = request.query_params
        rendered = content_transform(item, params.get("transform") or "full", params)
        return Response(
            {
                "item": self.get_serializer(item).data,
                "transform": rendered.transform,
                "content": rendered.content,
                "details": rendered.details,
            }
        )

    def create(self, request: Request) -> Response:
        serializer = ContentStoreSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        agent = agent_for_caller(self.principal, serializer.validated_data.get("agent"))
        item = content_item_store(
            agent=agent, actor=self.principal.actor, draft=serializer.to_draft()
        )
        return Response(self.get_serializer(item).data, status=status.HTTP_201_CREATED)

    @action(detail=False, methods=["post"])
    def clear(self, request: Request) -> Response:
        serializer = ContentClearSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        agent = agent_for_caller(self.principal, data.get("agent"))
        cleared = content_scope_clear(
            agent=agent, actor=self.principal.actor, scope=data["scope"], run_id=data["run_id"]
        )
        return Response({"cleared": cleared})


class ContentActionResultViewSet(AgentActionViewSet):
    @extend_schema(
        summary="Store an action's result and get what goes into the conversation",
        description="The first result of an action type in the agent's run comes back in full; "
        "later ones compacted. Both carry the item id and how to fetch the full content.",
        request=ActionResultSerializer,
        responses={201: ActionResultAnswerSerializer},
    )
    def create(self, request: Request) -> Response:
        serializer = ActionResultSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        outcome = action_result_record(
            agent=self.agent_named(data.get("agent")),
            actor=self.principal.actor,
            run_id=data["run_id"],
            action_type=data["action_type"],
            draft=serializer.to_draft(),
            goal=data["goal"],
        )
        item = outcome.item
        body = {
            "item": ContentItemSerializer(item).data,
            "first_time": outcome.first_time,
            "conversation": outcome.conversation,
            "summary": outcome.summary,
            "retrieve": {
                "item_id": item.key,
                "url": RETRIEVE_URL.format(key=item.key),
                "transforms": list(TRANSFORMS),
            },
            "tokens": {"full": item.tokens_full, "returned": item.tokens_returned},
        }
        return Response(body, status=status.HTTP_201_CREATED)


class ContentRunViewSet(TenantScopedViewSet):
    queryset = ContentItem.objects.all()
    agent_bound_actions = frozenset({"retrieve"})
    lookup_url_kwarg = "id"
    # Run ids are the client's; anything but a slash may be in one.
    lookup_value_regex = "[^/]+"

    @extend_schema(
        summary="A run's token savings: action results in full versus what was returned",
        responses=RunSavingsSerializer,
    )
    def retrieve(self, request: Request, id: str = "") -> Response:
        savings = content_run_savings(tenant=self.tenant, agent=self.principal.agent, run_id=id)
        if savings is None:
            raise NotFound()
        return Response(RunSavingsSerializer(savings).data)


@extend_schema_view(
    create=extend_schema(
        summary="Snapshot content items for a sub-agent (a read-only view, nothing copied)",
        request=SnapshotCreateSerializer,
        responses={201: SnapshotSerializer},
    ),
    retrieve=extend_schema(summary="A snapshot and its items' metadata"),
    restore=extend_schema(
        summary="Attach a snapshot's items to one of the caller's scopes (by reference)",
        request=SnapshotRestoreSerializer,
        responses={200: OpenApiTypes.OBJECT},
    ),
)
class ContentSnapshotViewSet(TenantScopedViewSet):
    queryset = ContentSnapshot.objects.select_related("owner", "grantee").order_by("id")
    serializer_class = SnapshotSerializer
    write_role = Role.AGENT
    agent_bound_actions = frozenset({"create", "retrieve", "restore"})
    lookup_field = "key"
    lookup_url_kwarg = "id"

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(
            pk__in=content_snapshots_visible(tenant=self.tenant, agent=self.principal.agent)
        )

    def create(self, request: Request) -> Response:
        serializer = SnapshotCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        owner = agent_for_caller(self.principal, data.get("agent"))
        grantee: Agent | None = None
        if data.get("grantee"):
            grantee = Agent.objects.filter(tenant=self.tenant, name=data["grantee"]).first()
            if grantee is None:
                raise NotFound()
        snapshot = content_snapshot_create(
            owner=owner,
            actor=self.principal.actor,
            items=content_items_visible(
                items=ContentItem.objects.filter(tenant=self.tenant), agent=owner
            ),
            item_keys=data["item_ids"],
            run_id=data.get("run_id"),
            grantee=grantee,
            label=data["label"],
        )
        return Response(self.get_serializer(snapshot).data, status=status.HTTP_201_CREATED)

    def retrieve(self, request: Request, id: str | None = None) -> Response:
        return Response(self.get_serializer(self.get_object()).data)

    @action(detail=True, methods=["post"])
    def restore(self, request: Request, id: str | None = None) -> Response:
        snapshot = self.get_object()
        serializer = SnapshotRestoreSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        agent = agent_for_caller(self.principal, data.get("agent"))
        attached = content_snapshot_restore(
            snapshot=snapshot, agent=agent, actor=self.principal.actor, run_id=data["run_id"]
        )
        return Response({"snapshot": snapshot.key, "run_id": data["run_id"], "items": attached})
