"""REST endpoints of the ledger app: agents and API keys."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import ApiError, CursorPagination
from config.datetimes import client_datetime_parse
from ledger import services
from ledger.models import Agent, ApiKey, Event, RecallSettings, Role
from ledger.receipts import receipt_parse, receipt_verify
from ledger.scoping import TenantScopedViewSet
from ledger.selectors import event_chain_verify, event_visible_to
from ledger.serializers import (
    AgentSerializer,
    ApiKeyCreatedSerializer,
    ApiKeySerializer,
    ChainReportSerializer,
    EventAppendSerializer,
    EventBatchSerializer,
    EventSerializer,
    RecallSettingsSerializer,
    ReceiptReportSerializer,
    ReceiptVerifySerializer,
)


@extend_schema_view(
    list=extend_schema(
        summary="List agents",
        parameters=[
            OpenApiParameter("name", str, description="Exact agent name"),
            OpenApiParameter("primary_role", str, description="Exact primary role"),
        ],
    ),
    create=extend_schema(summary="Register an agent (admin)"),
    retrieve=extend_schema(summary="Get an agent"),
    partial_update=extend_schema(summary="Change an agent (admin)"),
    update=extend_schema(summary="Replace an agent's editable fields (admin)"),
    destroy=extend_schema(summary="Delete an agent and its keys (admin)"),
)
class AgentViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    TenantScopedViewSet,
):
    queryset = Agent.objects.all()
    serializer_class = AgentSerializer
    # An agent-scoped key sees its own agent only (another agent's trust score and probation are
    # not its business); registering, changing and deleting agents manage the tenant.
    agent_bound_actions = frozenset({"list", "retrieve"})

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.principal.agent is not None:
            queryset = queryset.filter(pk=self.principal.agent.pk)
        for param in ("name", "primary_role"):
            value = self.request.query_params.get(param)
            if value is not None:
                queryset = queryset.filter(**{param: value})
        return queryset

    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        agent = services.agent_create(
            tenant=self.tenant, actor=self.principal.actor, **serializer.validated_data
        )
        return Response(self.get_serializer(agent).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, pk: str | None = None) -> Response:
        partial = self.action == "partial_update"
        agent = self.get_object()
        serializer = self.get_serializer(agent, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        agent = services.agent_update(
            agent=agent, actor=self.principal.actor, changes=dict(serializer.validated_data)
        )
        return Response(self.get_serializer(agent).data)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        return self.update(request, pk)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        services.agent_delete(agent=self.get_object(), actor=self.principal.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(
    list=extend_schema(summary="List API keys (admin)"),
    retrieve=extend_schema(summary="Get an API key's metadata (admin)"),
    create=extend_schema(
        summary="Create an API key (admin); the secret is in this response only",
        responses={201: ApiKeyCreatedSerializer},
    ),
    # No body: the viewset's serializer would otherwise be documented as a required request.
    revoke=extend_schema(
        summary="Revoke an API key (admin); effective on its next request", request=None
    ),
)
class ApiKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = ApiKey.objects.select_related("agent")
    serializer_class = ApiKeySerializer
    read_role = Role.ADMIN
    write_role = Role.ADMIN
    agent_bound_actions: frozenset[str] = frozenset()  # keys are the tenant's to manage

    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        api_key, raw_key = services.api_key_create(
            tenant=self.tenant, actor=self.principal.actor, **serializer.validated_data
        )
        body = ApiKeyCreatedSerializer(api_key, context=self.get_serializer_context()).data
        return Response({**body, "key": raw_key}, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        api_key = services.api_key_revoke(api_key=self.get_object(), actor=self.principal.actor)
        return Response(self.get_serializer(api_key).data)


def _parse_time(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    parsed = client_datetime_parse(raw)
    if parsed is None:
        raise ApiError(
            code="invalid_filter",
            message=f"{name} must be an ISO 8601 date-time, e.g. 2025-02-14T16:20:00Z, with an "
            "offset under 24 hours.",
        )
    return parsed


class EventCursorPagination(CursorPagination):
    ordering = "seq"


@extend_schema_view(
    list=extend_schema(
        summary="List events in seq order",
        description="An agent-scoped key sees its own events and the globally visible kinds.",
        parameters=[
            OpenApiParameter("run_id", str),
            OpenApiParameter("round_id", str),
            OpenApiParameter("actor", str),
            OpenApiParameter("kind", str, description="One kind, or several separated by commas"),
            OpenApiParameter("since", OpenApiTypes.DATETIME, description="created_at ≥ since"),
            OpenApiParameter("until", OpenApiTypes.DATETIME, description="created_at < until"),
        ],
    ),
    retrieve=extend_schema(summary="Get one event by its seq"),
    create=extend_schema(
        summary="Append one event",
        request=EventAppendSerializer,
        responses={201: EventSerializer},
    ),
    batch=extend_schema(
        summary="Append several events atomically (all or none)",
        request=EventBatchSerializer,
        responses={
            201: inline_serializer("EventBatchResult", {"events": EventSerializer(many=True)})
        },
    ),
    verify=extend_schema(
        summary="Verify the hash chain against its signed checkpoints; report the first break",
        responses=ChainReportSerializer,
    ),
    verify_receipt=extend_schema(
        summary="Check that the ledger still holds the history a Ledger-Receipt names",
        description="Every response to a request that appended events carries a "
        "`Ledger-Receipt: <tenant>:<seq>:<hash>` header; keep it, and send it here later. "
        "Answers 200 either way: `ok` false with a `code` when the history changed.",
        request=ReceiptVerifySerializer,
        responses=ReceiptReportSerializer,
    ),
)
class EventViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = Event.objects.all()
    serializer_class = EventSerializer
    pagination_class = EventCursorPagination
    lookup_field = "seq"
    lookup_value_regex = r"\d+"
    write_role = Role.AGENT
    # Any key of the tenant may check a receipt: the writer that holds it is often an agent.
    role_by_action = {"verify": Role.REVIEWER, "verify_receipt": Role.AGENT}
    # Appends are made as the key's agent (EventAppendSerializer); verifying reads the whole
    # tenant's chain. A receipt check answers only whether history the caller was handed still
    # holds, naming no other event's contents.
    agent_bound_actions = frozenset({"list", "retrieve", "create", "batch", "verify_receipt"})

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        agent = self.principal.agent
        if agent is not None:
            queryset = queryset.filter(event_visible_to(agent=agent))
        params = self.request.query_params
        for field in ("run_id", "round_id", "actor"):
            if field in params:
                queryset = queryset.filter(**{field: params[field]})
        if "kind" in params:
            queryset = queryset.filter(kind__in=params["kind"].split(","))
        since, until = _parse_time(self.request, "since"), _parse_time(self.request, "until")
        if since is not None:
            queryset = queryset.filter(created_at__gte=since)
        if until is not None:
            queryset = queryset.filter(created_at__lt=until)
        return queryset

    def create(self, request: Request) -> Response:
        serializer = EventAppendSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        draft = serializer.to_draft(dict(serializer.validated_data))
        events = services.events_append_from_client(tenant=self.tenant, drafts=[draft])
        return Response(self.get_serializer(events[0]).data, status=status.HTTP_201_CREATED)

    @action(detail=False, methods=["post"])
    def batch(self, request: Request) -> Response:
        serializer = EventBatchSerializer(data=request.data, context=self.get_serializer_context())
        if not serializer.is_valid():
            raise _batch_error(serializer.errors)
        item_serializer = EventAppendSerializer(context=self.get_serializer_context())
        drafts = []
        for index, item in enumerate(serializer.validated_data["events"]):
            try:
                drafts.append(item_serializer.to_draft(item))
            except ValidationError as exc:
                raise _batch_error({"events": {index: exc.detail}}) from exc
        events = services.events_append_from_client(tenant=self.tenant, drafts=drafts)
        return Response(
            {"events": self.get_serializer(events, many=True).data},
            status=status.HTTP_201_CREATED,
        )

    @action(detail=False, methods=["get"])
    def verify(self, request: Request) -> Response:
        report = event_chain_verify(tenant=self.tenant)
        return Response(ChainReportSerializer(report).data)

    @action(detail=False, methods=["post"], url_path="verify-receipt")
    def verify_receipt(self, request: Request) -> Response:
        serializer = ReceiptVerifySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        receipt = receipt_parse(serializer.validated_data["receipt"])
        report = receipt_verify(tenant=self.tenant, receipt=receipt)
        return Response(ReceiptReportSerializer(report).data)


def _batch_error(errors: Any) -> ApiError:
    """Name the first bad event of a batch by its index."""
    items = errors.get("events") if isinstance(errors, dict) else None
    if isinstance(items, list):  # DRF has reported per-item errors both as a list and a dict
        items = dict(enumerate(items))
    if isinstance(items, dict):
        for index, item_errors in sorted(items.items()):
            if item_errors:
                return ApiError(
                    code="invalid_event",
                    message=f"Event {index} is invalid; nothing was written.",
                    details={"index": index, "errors": item_errors},
                )
    return ApiError(
        code="validation_error",
        message="The batch is invalid; nothing was written.",
        details=errors if isinstance(errors, dict) else {"events": errors},
    )


@extend_schema_view(
    retrieve=extend_schema(summary="The tenant's recall and visibility rules"),
    partial_update=extend_schema(summary="Change the tenant's recall and visibility rules (admin)"),
)
class RecallSettingsViewSet(TenantScopedViewSet):
    """One resource per tenant, at /recall-settings/ (no id)."""

    queryset = RecallSettings.objects.all()
    serializer_class = RecallSettingsSerializer
    agent_bound_actions = frozenset({"retrieve"})  # the rules every agent is recalled by

    def retrieve(self, request: Request) -> Response:
        return Response(self.get_serializer(RecallSettings.for_tenant(self.tenant)).data)

    def partial_update(self, request: Request) -> Response:
        serializer = self.get_serializer(
            RecallSettings.for_tenant(self.tenant), data=request.data, partial=True
        )
        serializer.is_valid(raise_exception=True)
        updated = services.recall_settings_update(
            tenant=self.tenant, actor=self.principal.actor, changes=dict(serializer.validated_data)
        )
        return Response(self.get_serializer(updated).data)
