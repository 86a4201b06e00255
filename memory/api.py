"""REST endpoints of the memory app."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ledger.models import Agent, Role
from ledger.scoping import TenantScopedViewSet
from ledger.serializers import EventSerializer
from memory.recall import recall_episodic, recall_salience
from memory.reflection import reflection_create_if_due, reflection_state
from memory.serializers import (
    RecallRequestSerializer,
    RecallResultSerializer,
    ReflectionRequestSerializer,
    ReflectionResultSerializer,
)


class AgentActionViewSet(TenantScopedViewSet):
    """Actions taken for one agent named in the body. Agents are looked up through the tenant
    scope, and an agent-scoped key can name only its own agent (others are "not found")."""

    queryset = Agent.objects.all()
    write_role = Role.AGENT

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.principal.agent is not None:
            return queryset.filter(pk=self.principal.agent.pk)
        return queryset

    def agent_named(self, name: str | None) -> Agent:
        if name is None:
            if self.principal.agent is None:
                raise ValidationError({"agent": ["This field is required."]})
            name = self.principal.agent.name
        agent = self.get_queryset().filter(name=name).first()
        if agent is None:
            raise NotFound()
        return agent  # type: ignore[no-any-return]


class RecallViewSet(AgentActionViewSet):
    @extend_schema(
        summary="Recall what an agent remembers of a run (episodic or salience)",
        request=RecallRequestSerializer,
        responses=RecallResultSerializer,
    )
    def create(self, request: Request) -> Response:
        serializer = RecallRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        agent = self.agent_named(data.get("agent"))
        if data["mode"] == "episodic":
            result = recall_episodic(
                agent=agent, run_id=data["run_id"], max_recent=data.get("max_recent")
            )
        else:
            result = recall_salience(
                agent=agent,
                run_id=data["run_id"],
                query=data["query"],
                current_turn=data.get("current_turn"),
                top_k=data.get("top_k"),
            )
        return Response(RecallResultSerializer(result).data)


class ReflectionViewSet(AgentActionViewSet):
    @extend_schema(
        summary="Append the agent's reflection for a run if one is due",
        request=ReflectionRequestSerializer,
        responses={200: ReflectionResultSerializer, 201: ReflectionResultSerializer},
    )
    def create(self, request: Request) -> Response:
        serializer = ReflectionRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        agent = self.agent_named(data.get("agent"))
        event = reflection_create_if_due(agent=agent, run_id=data["run_id"], force=data["force"])
        state = reflection_state(agent=agent, run_id=data["run_id"])
        body = {
            "created": event is not None,
            "qualifying_events": state.qualifying_events,
            "reflections_made": state.reflections_made,
            "threshold": state.threshold,
            "event": EventSerializer(event, context=self.get_serializer_context()).data
            if event
            else None,
        }
        return Response(body, status=status.HTTP_201_CREATED if event else status.HTTP_200_OK)
