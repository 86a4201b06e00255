"""REST endpoints of rounds, dissents and overrides.

Judgements about an agent (impact, overrides, finalising, reverts) are tenant-wide actions, so no
agent grades itself (``ledger.permissions``: 403 ``agent_scoped_key``); an agent-scoped key logs
its own dissents and reads its own evidence."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import CursorPagination
from ledger.models import Role
from ledger.scoping import TenantScopedViewSet
from memory.episodic.api import agent_for_caller
from trust.rounds import overrides, services
from trust.rounds.models import Dissent, Override, Round
from trust.rounds.serializers import (
    ArtifactVersionSerializer,
    DissentImpactSerializer,
    DissentLogSerializer,
    DissentSerializer,
    OverrideLogSerializer,
    OverrideRevertSerializer,
    OverrideRevertWithdrawSerializer,
    OverrideSerializer,
    RoundFinalizeSerializer,
    RoundPostSerializer,
    RoundSerializer,
    RoundVersionSerializer,
)


class NewestFirst(CursorPagination):
    ordering = "-id"


class OwnEvidenceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Rows about one agent: an agent-scoped key sees only its own agent's."""

    pagination_class = NewestFirst
    lookup_value_regex = r"\d+"
    write_role = Role.AGENT
    agent_bound_actions = frozenset({"list", "retrieve"})

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.principal.agent is not None:
            queryset = queryset.filter(agent=self.principal.agent)
        params = self.request.query_params
        if "agent" in params:
            queryset = queryset.filter(agent__name=params["agent"])
        if "round_id" in params:
            queryset = queryset.filter(round_id=params["round_id"])
        return queryset


EVIDENCE_FILTERS = [
    OpenApiParameter("agent", str, description="Agent name"),
    OpenApiParameter("round_id", str, description="The orchestrator's round id"),
]


@extend_schema_view(
    list=extend_schema(summary="List rounds (newest first)", parameters=EVIDENCE_FILTERS[1:]),
    retrieve=extend_schema(summary="Get a round with its participants and output versions"),
    create=extend_schema(
        summary="Create a round or add participants to it",
        request=RoundPostSerializer,
        responses={201: RoundSerializer},
    ),
    finalize=extend_schema(
        summary="Set the round's final output; regret is inferred for its overrides",
        request=RoundFinalizeSerializer,
        responses=RoundSerializer,
    ),
    versions=extend_schema(
        summary="Post a newer version of the round's output",
        request=RoundVersionSerializer,
        responses={201: ArtifactVersionSerializer},
    ),
)
class RoundViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = Round.objects.prefetch_related("participants__agent", "versions")
    serializer_class = RoundSerializer
    pagination_class = NewestFirst
    lookup_value_regex = r"\d+"
    write_role = Role.AGENT
    # Rounds are the team's, read by all; posting, finalising and revising one is the
    # orchestrator's (a tenant-wide key).
    agent_bound_actions = frozenset({"list", "retrieve"})

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if "round_id" in self.request.query_params:
            queryset = queryset.filter(round_id=self.request.query_params["round_id"])
        return queryset

    def create(self, request: Request) -> Response:
        serializer = RoundPostSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        round_ = services.rounds_post(
            tenant=self.tenant, actor=self.principal.actor, **serializer.validated_data
        )
        return Response(self._render(round_), status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def finalize(self, request: Request, pk: str | None = None) -> Response:
        round_ = self.get_object()
        serializer = RoundFinalizeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        round_ = services.round_finalize(
            round=round_,
            final_output=serializer.validated_data["final_output"],
            actor=self.principal.actor,
        )
        return Response(self._render(round_))

    @action(detail=True, methods=["post"])
    def versions(self, request: Request, pk: str | None = None) -> Response:
        round_ = self.get_object()
        serializer = RoundVersionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = services.round_revise(
            round=round_,
            content=serializer.validated_data["content"],
            author=serializer.validated_data.get("author", self.principal.actor),
            actor=self.principal.actor,
        )
        return Response(ArtifactVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    def _render(self, round_: Round) -> dict[str, Any]:
        return dict(self.get_serializer(self.get_queryset().get(pk=round_.pk)).data)


@extend_schema_view(
    list=extend_schema(summary="List dissents (newest first)", parameters=EVIDENCE_FILTERS),
    retrieve=extend_schema(summary="Get a dissent with its depth"),
    create=extend_schema(
        summary="Log a dissent (an agent-scoped key: for its own agent)",
        request=DissentLogSerializer,
        responses={201: DissentSerializer},
    ),
    impact=extend_schema(
        summary="Set whether the dissent changed the final output (once)",
        request=DissentImpactSerializer,
        responses=DissentSerializer,
    ),
)
class DissentViewSet(OwnEvidenceViewSet):
    queryset = Dissent.objects.select_related("agent")
    serializer_class = DissentSerializer
    agent_bound_actions = OwnEvidenceViewSet.agent_bound_actions | {"create"}

    def create(self, request: Request) -> Response:
        serializer = DissentLogSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        agent = agent_for_caller(self.principal, data.pop("agent", None))
        dissent = services.dissent_log(agent=agent, actor=self.principal.actor, **data)
        return Response(self.get_serializer(dissent).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def impact(self, request: Request, pk: str | None = None) -> Response:
        dissent = self.get_object()
        serializer = DissentImpactSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        dissent = services.dissent_set_impact(
            dissent=dissent, actor=self.principal.actor, **serializer.validated_data
        )
        return Response(self.get_serializer(dissent).data)


@extend_schema_view(
    list=extend_schema(summary="List overrides (newest first)", parameters=EVIDENCE_FILTERS),
    retrieve=extend_schema(summary="Get an override"),
    create=extend_schema(
        summary="Log that a person overrode an agent's output (tenant-wide key)",
        request=OverrideLogSerializer,
        responses={201: OverrideSerializer},
    ),
    revert=extend_schema(
        summary="Mark an override reverted: regret, at once (reviewer)",
        request=OverrideRevertSerializer,
        responses=OverrideSerializer,
    ),
    revert_withdraw=extend_schema(
        summary="Withdraw an override's revert: open again, no regret (reviewer)",
        request=OverrideRevertWithdrawSerializer,
        responses=OverrideSerializer,
    ),
)
class OverrideViewSet(OwnEvidenceViewSet):
    queryset = Override.objects.select_related("agent")
    serializer_class = OverrideSerializer
    role_by_action = {"revert": Role.REVIEWER, "revert_withdraw": Role.REVIEWER}

    def create(self, request: Request) -> Response:
        serializer = OverrideLogSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        agent = agent_for_caller(self.principal, data.pop("agent"))
        data.setdefault("decided_by", self.principal.actor)
        override = overrides.override_log(agent=agent, actor=self.principal.actor, **data)
        return Response(self.get_serializer(override).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def revert(self, request: Request, pk: str | None = None) -> Response:
        override = self.get_object()
        serializer = OverrideRevertSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        override = overrides.override_revert(
            override=override,
            reverted_by=serializer.validated_data.get("reverted_by", self.principal.actor),
            note=serializer.validated_data["note"],
            actor=self.principal.actor,
        )
        return Response(self.get_serializer(override).data)

    @action(detail=True, methods=["post"], url_path="revert/withdraw")
    def revert_withdraw(self, request: Request, pk: str | None = None) -> Response:
        override = self.get_object()
        serializer = OverrideRevertWithdrawSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        override = overrides.override_revert_withdraw(
            override=override,
            note=serializer.validated_data["note"],
            actor=self.principal.actor,
        )
        return Response(self.get_serializer(override).data)
