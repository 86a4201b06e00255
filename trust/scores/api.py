"""REST endpoints of trust scores: agents with their scores, one agent's trust (score, terms,
history, statistics, recent evidence), recomputing scores, and the per-agent document's export
and import (trust.interchange), which share the ``trust/`` resource and its per-agent scoping.

An agent-scoped key reads only its own agent's trust; recompute and import are an admin's."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from ledger.models import Agent, Role
from ledger.scoping import TenantScopedViewSet
from trust.interchange import selectors as interchange_selectors
from trust.interchange import services as interchange
from trust.rounds.models import Dissent, Override
from trust.rounds.selectors import agents_named
from trust.scores import selectors, services
from trust.scores.serializers import (
    TrustAgentSerializer,
    TrustDetailSerializer,
    TrustRecomputeSerializer,
)


def _count_of(model: type[Dissent] | type[Override]) -> Coalesce:
    rows = (
        model.objects.filter(agent=OuterRef("pk"))
        .order_by()
        .values("agent")
        .annotate(n=Count("id"))
        .values("n")
    )
    return Coalesce(Subquery(rows, output_field=IntegerField()), 0)


@extend_schema_view(
    list=extend_schema(summary="Agents with their trust scores, probation and evidence counts"),
    retrieve=extend_schema(
        summary="An agent's trust: score, its terms, history, statistics, recent evidence",
        responses=TrustDetailSerializer,
    ),
    export=extend_schema(
        summary="Export the agent as the design note's per-agent document",
        responses=OpenApiTypes.OBJECT,
    ),
    import_document=extend_schema(
        summary="Import one agent's document (admin)",
        request=OpenApiTypes.OBJECT,
        responses={201: TrustAgentSerializer},
    ),
    recompute=extend_schema(
        summary="Recompute trust scores now (admin)",
        request=TrustRecomputeSerializer,
        responses=inline_serializer("TrustRecomputed", {"changed": serializers.IntegerField()}),
    ),
)
class TrustViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = Agent.objects.annotate(
        dissent_count=_count_of(Dissent), override_count=_count_of(Override)
    ).order_by("id")
    serializer_class = TrustAgentSerializer
    lookup_value_regex = r"\d+"
    role_by_action = {"import_document": Role.ADMIN, "recompute": Role.ADMIN}
    agent_bound_actions = frozenset({"list", "retrieve", "export"})

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.principal.agent is not None:
            return queryset.filter(pk=self.principal.agent.pk)
        return queryset

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None
        return self.get_paginated_response(
            [selectors.agent_trust_summary(agent=agent) for agent in page]
        )

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        body = selectors.agent_trust_detail(agent=self.get_object())
        return Response(TrustDetailSerializer(body).data)

    @action(detail=True, methods=["get"])
    def export(self, request: Request, pk: str | None = None) -> Response:
        return Response(interchange_selectors.agent_export(agent=self.get_object()))

    @action(detail=False, methods=["post"], url_path="import")
    def import_document(self, request: Request) -> Response:
        agent = interchange.agent_import(
            tenant=self.tenant, document=request.data, actor=self.principal.actor
        )
        # Read through the tenant, not get_queryset(): the imported agent is not the caller's
        # to look up by the caller's scope (a scoped re-read here once answered 500 after the
        # import had committed).
        imported = self.queryset.filter(tenant=self.tenant).get(pk=agent.pk)
        return Response(
            selectors.agent_trust_summary(agent=imported), status=status.HTTP_201_CREATED
        )

    @action(detail=False, methods=["post"])
    def recompute(self, request: Request) -> Response:
        serializer = TrustRecomputeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        names = serializer.validated_data.get("agents")
        agent_ids = None
        if names is not None:
            found = agents_named(tenant=self.tenant, names=names)
            agent_ids = [agent.pk for agent in found.values()]
        changed = services.trust_recompute(
            tenant=self.tenant, agent_ids=agent_ids, reason="recomputed"
        )
        return Response({"changed": changed})
