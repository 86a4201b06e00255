"""REST endpoints of trust governance: Devil's Advocate, metrics, gaming flags, the rubric and
its proposals. Each view parses, calls one service or selector of trust.governance, renders."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import ApiError
from ledger.models import Agent, Role
from ledger.scoping import TenantScopedViewSet
from trust.governance.models import GamingFlag, RubricProposal, RubricVersion
from trust.governance.selectors import rubric_current, trust_metrics
from trust.governance.serializers import (
    DevilsAdvocatePickSerializer,
    DevilsAdvocateRequestSerializer,
    GamingFlagReviewSerializer,
    GamingFlagSerializer,
    MetricsQuerySerializer,
    RubricProposalCreateSerializer,
    RubricProposalDecisionSerializer,
    RubricProposalSerializer,
    RubricVersionCreateSerializer,
    RubricVersionSerializer,
    TrustMetricsSerializer,
)
from trust.governance.services import (
    devils_advocate_pick,
    gaming_flag_review,
    rubric_proposal_decide,
    rubric_proposal_open,
    rubric_version_create,
)
from trust.rounds.models import Override
from trust.rounds.selectors import agents_named, unknown_agents


def status_filtered(
    queryset: QuerySet[Any], wanted: str | None, statuses: list[str]
) -> QuerySet[Any]:
    if wanted is None:
        return queryset
    if wanted not in statuses:
        raise ApiError(code="invalid_filter", message=f"status is one of {', '.join(statuses)}.")
    return queryset.filter(status=wanted)


class DevilsAdvocateViewSet(TenantScopedViewSet):
    queryset = Agent.objects.all()
    write_role = Role.AGENT
    # Tenant-wide: the pick is among other agents and answers with each candidate's trust weight,
    # which an agent-scoped key may not read of another agent.
    agent_bound_actions: frozenset[str] = frozenset()

    @extend_schema(
        summary="Pick the Devil's Advocate among candidate agents, weighted by trust",
        description="Candidates above the trust floor and out of probation are eligible (all "
        "of them when none is); the pick, weights and seed are logged to the ledger.",
        request=DevilsAdvocateRequestSerializer,
        # A pick creates no object of this resource: it answers 200, as documented here.
        responses={200: DevilsAdvocatePickSerializer},
    )
    def create(self, request: Request) -> Response:
        serializer = DevilsAdvocateRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        pick = devils_advocate_pick(
            tenant=self.tenant,
            candidates=serializer.validated_data["candidates"],
            seed=serializer.validated_data["seed"],
            actor=self.principal.actor,
        )
        return Response(DevilsAdvocatePickSerializer(pick).data)


class TrustMetricsViewSet(TenantScopedViewSet):
    queryset = Agent.objects.all()
    read_role = Role.REVIEWER
    agent_bound_actions = frozenset({"retrieve"})  # an agent-scoped key: its own metrics only

    @extend_schema(
        summary="Dissent impact, regret and escalation usefulness per bucket of time",
        parameters=[
            OpenApiParameter("agent", str, description="Agent name; the whole tenant if omitted"),
            OpenApiParameter(
                "since", OpenApiTypes.DATETIME, description="Inclusive; default 90 days before"
            ),
            OpenApiParameter("until", OpenApiTypes.DATETIME, description="Exclusive; default now"),
            OpenApiParameter("bucket", str, enum=["day", "week", "month"], default="week"),
        ],
        responses=TrustMetricsSerializer,
    )
    def retrieve(self, request: Request) -> Response:
        query = MetricsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        metrics = trust_metrics(
            tenant=self.tenant,
            agent=self._agent(params.get("agent")),
            since=params.get("since"),
            until=params.get("until"),
            bucket=params["bucket"],
        )
        return Response(TrustMetricsSerializer(metrics).data)

    def _agent(self, name: str | None) -> Agent | None:
        """An agent-scoped key sees its own agent's metrics only."""
        own = self.principal.agent
        if name is None:
            return own
        agent = agents_named(tenant=self.tenant, names=[name])[name]
        if own is not None and agent.pk != own.pk:
            raise unknown_agents([name])
        return agent


@extend_schema_view(
    list=extend_schema(
        summary="List gaming flags (reviewer)",
        parameters=[
            OpenApiParameter("status", str, enum=GamingFlag.Status.values),
            OpenApiParameter("agent", str, description="Agent name"),
        ],
    ),
    retrieve=extend_schema(summary="Get a gaming flag (reviewer)"),
    review=extend_schema(
        summary="Dismiss or confirm an open gaming flag (reviewer)",
        request=GamingFlagReviewSerializer,
        responses=GamingFlagSerializer,
    ),
)
class GamingFlagViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = GamingFlag.objects.select_related("agent")
    serializer_class = GamingFlagSerializer
    lookup_value_regex = r"\d+"
    read_role = Role.REVIEWER
    write_role = Role.REVIEWER
    # Tenant-wide: flags are oversight of the agents, which no agent reviews (nor dismisses).
    agent_bound_actions: frozenset[str] = frozenset()

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        params = self.request.query_params
        if self.action != "list":
            return queryset
        queryset = status_filtered(queryset, params.get("status"), GamingFlag.Status.values)
        if "agent" in params:
            queryset = queryset.filter(agent__name=params["agent"])
        return queryset

    @action(detail=True, methods=["post"])
    def review(self, request: Request, pk: str | None = None) -> Response:
        flag = self.get_object()
        serializer = GamingFlagReviewSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        reviewed = gaming_flag_review(
            flag=flag,
            status=serializer.validated_data["status"],
            note=serializer.validated_data["note"],
            actor=self.principal.actor,
        )
        return Response(self.get_serializer(reviewed).data)


class RubricViewSet(TenantScopedViewSet):
    queryset = RubricVersion.objects.prefetch_related("criteria")
    serializer_class = RubricVersionSerializer
    read_role = Role.AGENT
    write_role = Role.ADMIN
    agent_bound_actions = frozenset({"retrieve"})  # every agent dissents against the rubric

    @extend_schema(summary="The current rubric version with its criteria")
    def retrieve(self, request: Request) -> Response:
        current = rubric_current(tenant=self.tenant)
        if current is None:
            raise ApiError(
                code="no_rubric",
                message="This tenant has no rubric yet; an admin posts one to /api/v1/rubric/.",
                status_code=status.HTTP_404_NOT_FOUND,
            )
        return Response(self.get_serializer(current).data)

    @extend_schema(
        summary="Make a new rubric version from a full list of criteria (admin)",
        request=RubricVersionCreateSerializer,
        responses={201: RubricVersionSerializer},
    )
    def create(self, request: Request) -> Response:
        serializer = RubricVersionCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = rubric_version_create(
            tenant=self.tenant,
            criteria=serializer.drafts(),
            actor=self.principal.actor,
            note=serializer.validated_data["note"],
        )
        return Response(self.get_serializer(version).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    list=extend_schema(summary="Every rubric version, oldest first"),
    retrieve=extend_schema(summary="One rubric version by its number"),
)
class RubricVersionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = RubricVersion.objects.prefetch_related("criteria").order_by("number")
    serializer_class = RubricVersionSerializer
    lookup_field = "number"
    lookup_value_regex = r"\d+"
    pagination_class = None  # a rubric has a handful of versions; numbers are the cursor
    agent_bound_actions = frozenset({"list", "retrieve"})


@extend_schema_view(
    list=extend_schema(
        summary="List rubric proposals",
        parameters=[OpenApiParameter("status", str, enum=RubricProposal.Status.values)],
    ),
    retrieve=extend_schema(summary="Get a rubric proposal"),
    create=extend_schema(
        summary="Propose a rubric change from an override (tenant-wide key)",
        description="In the name of the override's decision maker, who needs trust at least "
        "RUBRIC_PROPOSAL_MIN_TRUST (an agent's trust score, or a person's track record).",
        request=RubricProposalCreateSerializer,
        responses={201: RubricProposalSerializer},
    ),
    accept=extend_schema(
        summary="Accept a pending proposal: a new rubric version (admin)",
        request=RubricProposalDecisionSerializer,
        responses=RubricProposalSerializer,
    ),
    reject=extend_schema(
        summary="Reject a pending proposal (admin)",
        request=RubricProposalDecisionSerializer,
        responses=RubricProposalSerializer,
    ),
)
class RubricProposalViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = RubricProposal.objects.all()
    serializer_class = RubricProposalSerializer
    lookup_value_regex = r"\d+"
    write_role = Role.AGENT
    role_by_action = {"accept": Role.ADMIN, "reject": Role.ADMIN}
    # Tenant-wide: proposing speaks for whoever decided the override, deciding changes the
    # rubric, and a proposal shows its proposer's trust (an agent's, it may be).
    agent_bound_actions: frozenset[str] = frozenset()

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.action != "list":
            return queryset
        wanted = self.request.query_params.get("status")
        return status_filtered(queryset, wanted, RubricProposal.Status.values)

    def create(self, request: Request) -> Response:
        serializer = RubricProposalCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        override = Override.objects.filter(tenant=self.tenant, pk=data["override"]).first()
        if override is None:
            raise NotFound()
        proposal = rubric_proposal_open(
            override=override,
            action=data["action"],
            criterion=data["criterion"],
            description=data["description"],
            rationale=data["rationale"],
            actor=self.principal.actor,
        )
        return Response(self.get_serializer(proposal).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def accept(self, request: Request, pk: str | None = None) -> Response:
        return self._decide(request, accept=True)

    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        return self._decide(request, accept=False)

    def _decide(self, request: Request, *, accept: bool) -> Response:
        proposal = self.get_object()
        serializer = RubricProposalDecisionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        decided = rubric_proposal_decide(
            proposal=proposal,
            accept=accept,
            note=serializer.validated_data["note"],
            actor=self.principal.actor,
        )
        return Response(self.get_serializer(decided).data)
