"""REST endpoints of episodic memories (``/api/v1/memories/...``), and the base of the views that
act for one agent named in the body."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import ApiError, CursorPagination
from ledger.auth import ApiPrincipal
from ledger.models import Agent, Event, Role
from ledger.scoping import TenantScopedViewSet
from ledger.selectors import agent_named
from memory.consolidation.services import memories_supersede
from memory.episodic.bulk import memories_bulk_delete, memories_bulk_update
from memory.episodic.selectors import memory_events, memory_history, memory_stored_event
from memory.episodic.serializers import (
    MemoryBatchSerializer,
    MemoryBulkDeleteSerializer,
    MemoryBulkResultSerializer,
    MemoryBulkUpdateSerializer,
    MemoryHistorySerializer,
    MemoryInputSerializer,
    MemorySerializer,
    MemoryStoredSerializer,
    MemoryStoreSerializer,
    MemorySupersedeSerializer,
    MemoryUpdateSerializer,
)
from memory.episodic.services import (
    MEMORY_REASON_MAX_CHARS,
    memories_store,
    memory_delete,
    memory_update,
)
from memory.episodic.validity import validity_from_query
from memory.models import Memory
from memory.search.api import MemorySearchActions
from memory.search.filter_schema import FILTER_REF
from memory.search.filters import MemoryFilter, filter_parse


class NewestFirstCursorPagination(CursorPagination):
    ordering = "-id"


class LedgerOrderCursorPagination(CursorPagination):
    ordering = "seq"


class AgentActionViewSet(TenantScopedViewSet):
    """Actions taken for one agent named in the body. Agents are looked up through the tenant
    scope, and an agent-scoped key can name only its own agent (others are "not found")."""

    queryset = Agent.objects.all()
    write_role = Role.AGENT
    agent_bound_actions = frozenset({"create"})

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.principal.agent is not None:
            return queryset.filter(pk=self.principal.agent.pk)
        return queryset

    def agent_named(self, name: str | None) -> Agent:
        return agent_for_caller(self.principal, name)


def agent_for_caller(principal: ApiPrincipal, name: str | None) -> Agent:
    """The agent a request acts for: the named one of the caller's tenant, or an agent-scoped
    key's own agent. Any other agent, including another tenant's, is "not found"."""
    own = principal.agent
    if name is None:
        if own is None:
            raise ValidationError({"agent": ["This field is required."]})
        return own
    if own is not None and own.name != name:
        raise NotFound()
    # The tenant and its recall settings come along: searches read both.
    agent = agent_named(tenant_id=principal.tenant.pk, name=name)
    if agent is None:
        raise NotFound()
    return agent


def _json_param(name: str, raw: str, example: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ApiError(
            code="invalid_filter", message=f"{name} must be a JSON object, e.g. {example}."
        )
    return value


def list_filter(params: Mapping[str, str]) -> MemoryFilter:
    """The list's query parameters as one filter: ``filter`` (the language of
    memory.search.filters, as JSON) ANDed with the older fixed ones, which are compiled into it
    (``tag`` is one tag the memories carry; ``metadata`` a JSON object their metadata contains)."""
    fixed: dict[str, Any] = {
        name: params[name] for name in ("session_id", "memory_type") if name in params
    }
    if "tag" in params:
        fixed["tags"] = params["tag"]
    if "metadata" in params:
        contained = _json_param("metadata", params["metadata"], '{"source": "slack"}')
        fixed["metadata"] = {key: {"eq": value} for key, value in contained.items()}
    parts = [fixed] if fixed else []
    if "filter" in params:
        parts.append(_json_param("filter", params["filter"], '{"importance": {"gte": 0.5}}'))
    return filter_parse({"AND": parts} if len(parts) > 1 else (parts[0] if parts else None))


@extend_schema_view(
    list=extend_schema(
        summary="List memories (newest first)",
        parameters=[
            OpenApiParameter("agent", str, description="Agent name"),
            OpenApiParameter("session_id", str),
            OpenApiParameter("memory_type", str),
            OpenApiParameter("tag", str, description="Memories carrying this tag"),
            OpenApiParameter(
                "filter",
                FILTER_REF,
                description="A filter as JSON (docs/filters.md), ANDed with the ones above",
            ),
            OpenApiParameter(
                "metadata",
                str,
                description='Metadata containing this JSON object, e.g. {"source": "slack"}',
            ),
            OpenApiParameter("include_expired", bool, description="Also expired ones"),
            OpenApiParameter("include_archived", bool, description="Also archived ones"),
            OpenApiParameter(
                "include_superseded",
                bool,
                description="Also memories whose validity ended (superseded ones)",
            ),
            OpenApiParameter(
                "as_of",
                OpenApiTypes.DATETIME,
                description="Only memories valid then; not with include_superseded",
            ),
        ],
    ),
    retrieve=extend_schema(summary="Get a memory"),
    create=extend_schema(
        summary="Store a memory",
        description="The answer says which older memories it superseded (supersedes) and "
        "which it would (supersession_candidates), by CONSOLIDATION_MODE.",
        request=MemoryStoreSerializer,
        responses={201: MemoryStoredSerializer},
    ),
    batch=extend_schema(
        summary="Store several memories of one agent (all or none)",
        request=MemoryBatchSerializer,
        responses={
            201: inline_serializer(
                "MemoryBatchResult", {"memories": MemoryStoredSerializer(many=True)}
            )
        },
    ),
    supersede=extend_schema(
        summary="Mark older memories of the agent as superseded by this one",
        description="Each one's validity ends where this memory's begins (valid_from); default "
        "search, lists and working memory leave them out, as_of still finds them.",
        request=MemorySupersedeSerializer,
        responses=MemoryStoredSerializer,
    ),
    partial_update=extend_schema(
        summary="Change a memory's content, type, importance, tags, metadata or expiry",
        request=MemoryUpdateSerializer,
        responses=MemorySerializer,
    ),
    destroy=extend_schema(
        summary="Delete a memory for good (its content is shredded)",
        parameters=[
            OpenApiParameter(
                "reason",
                str,
                description=f"Why, at most {MEMORY_REASON_MAX_CHARS} characters (kept in "
                "the clear; the history shows it).",
            )
        ],
    ),
    bulk_update=extend_schema(
        summary="Update memories chosen by ids, a filter or all, one event each (or a dry run)",
        request=MemoryBulkUpdateSerializer,
        responses=MemoryBulkResultSerializer,
    ),
    bulk_delete=extend_schema(
        summary="Delete memories chosen by ids, a filter or all, shredding each (or a dry run)",
        request=MemoryBulkDeleteSerializer,
        responses=MemoryBulkResultSerializer,
    ),
    history=extend_schema(
        summary="A memory's changes with their values before and after, oldest first",
        description="Every store, update, archiving, expiry and deletion of the memory, with who "
        "made it and why; a deleted memory keeps its history, its content shredded.",
        responses=MemoryHistorySerializer(many=True),
    ),
)
class MemoryViewSet(
    MemorySearchActions, mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet
):
    """Episodic memories. An agent-scoped key sees and changes only its own agent's memories."""

    queryset = Memory.objects.select_related("agent").order_by("-id")
    serializer_class = MemorySerializer
    pagination_class = NewestFirstCursorPagination
    write_role = Role.AGENT
    agent_bound_actions = frozenset(
        {
            "list",
            "retrieve",
            "create",
            "batch",
            "partial_update",
            "destroy",
            "search",
            "history",
            "supersede",
            "bulk_update",
            "bulk_delete",
        }
    )

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.principal.agent is not None:
            queryset = queryset.filter(agent=self.principal.agent)
        params = self.request.query_params
        if "agent" in params:
            queryset = queryset.filter(agent__name=params["agent"])
        if self.action == "list":
            queryset = queryset.filter(list_filter(params).q())
        if self.action == "destroy":
            return queryset  # an expired or archived memory can still be deleted
        now = timezone.now()
        if self.action == "list":  # a superseded memory is still there to read by its id
            queryset = queryset.filter(validity_from_query(params).q(now=now))
        if params.get("include_archived") != "true":
            queryset = queryset.filter(archived_at__isnull=True)
        if params.get("include_expired") != "true":
            queryset = queryset.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        return queryset

    def agent_named(self, name: str | None) -> Agent:
        return agent_for_caller(self.principal, name)

    def create(self, request: Request) -> Response:
        serializer = MemoryStoreSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        agent = agent_for_caller(self.principal, serializer.validated_data.get("agent"))
        stored = memories_store(
            agent=agent,
            drafts=[serializer.to_draft(dict(serializer.validated_data))],
            actor=self.principal.actor,
        )
        return Response(MemoryStoredSerializer(stored[0]).data, status=status.HTTP_201_CREATED)

    @action(detail=False, methods=["post"])
    def batch(self, request: Request) -> Response:
        serializer = MemoryBatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        agent = agent_for_caller(self.principal, serializer.validated_data.get("agent"))
        item = MemoryInputSerializer()
        drafts = [item.to_draft(data) for data in serializer.validated_data["memories"]]
        stored = memories_store(
            agent=agent,
            drafts=drafts,
            actor=self.principal.actor,
            defer_consolidation=serializer.validated_data["defer_consolidation"],
        )
        return Response(
            {"memories": MemoryStoredSerializer(stored, many=True).data},
            status=status.HTTP_201_CREATED,
        )

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        serializer = MemoryUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        changes = dict(serializer.validated_data)
        reason = changes.pop("reason", "")
        memory = memory_update(
            memory=self.get_object(), actor=self.principal.actor, changes=changes, reason=reason
        )
        return Response(self.get_serializer(memory).data)

    @action(detail=True, methods=["post"])
    def supersede(self, request: Request, pk: str | None = None) -> Response:
        serializer = MemorySupersedeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        memory = self.get_object()
        memory.consolidation = memories_supersede(
            memory=memory, ids=serializer.validated_data["supersedes"], actor=self.principal.actor
        )
        memory.refresh_from_db()
        return Response(MemoryStoredSerializer(memory).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        reason = request.query_params.get("reason", "")
        if len(reason) > MEMORY_REASON_MAX_CHARS:
            raise ApiError(
                code="invalid_parameter",
                message=f"reason holds at most {MEMORY_REASON_MAX_CHARS} characters.",
                details={"parameter": "reason"},
            )
        memory_delete(memory=self.get_object(), actor=self.principal.actor, reason=reason)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @action(detail=False, methods=["post"], url_path="bulk-update")
    def bulk_update(self, request: Request) -> Response:
        serializer = MemoryBulkUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        outcome = memories_bulk_update(
            agent=agent_for_caller(self.principal, serializer.validated_data.get("agent")),
            selection=serializer.selection(),
            changes=serializer.changes_asked(),
            actor=self.principal.actor,
            dry_run=serializer.validated_data["dry_run"],
        )
        return Response(MemoryBulkResultSerializer(outcome).data)

    @action(detail=False, methods=["post"], url_path="bulk-delete")
    def bulk_delete(self, request: Request) -> Response:
        serializer = MemoryBulkDeleteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        outcome = memories_bulk_delete(
            agent=agent_for_caller(self.principal, serializer.validated_data.get("agent")),
            selection=serializer.selection(),
            actor=self.principal.actor,
            reason=serializer.validated_data["reason"],
            dry_run=serializer.validated_data["dry_run"],
        )
        return Response(MemoryBulkResultSerializer(outcome).data)

    # Read from the ledger, not the row: a deleted memory keeps its history.
    @action(detail=True, methods=["get"], pagination_class=LedgerOrderCursorPagination)
    def history(self, request: Request, pk: str | None = None) -> Response:
        # An id no memory can have (not a bigint) is "not found" like one that never existed.
        stored = (
            memory_stored_event(tenant=self.tenant, memory_id=int(pk), agent=self.principal.agent)
            if pk is not None and pk.isascii() and pk.isdigit() and len(pk) <= 18
            else None
        )
        # Paginated first: a tampered cursor or page size is a 400 before the lookup's 404.
        page = self.paginate_queryset(
            Event.objects.none() if stored is None else memory_events(stored=stored)
        )
        if stored is None:
            raise NotFound()
        entries = memory_history(stored=stored, page=page or [])
        return self.get_paginated_response(MemoryHistorySerializer(entries, many=True).data)
