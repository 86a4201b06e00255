"""REST endpoints of recall (what an agent remembers of a run) and of its reflections."""

from __future__ import annotations

from drf_spectacular.utils import (
    extend_schema,
)
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ledger.serializers import EventSerializer
from memory.episodic.api import AgentActionViewSet
from memory.recall.selectors import recall_episodic, recall_salience
from memory.recall.serializers import (
    RecallRequestSerializer,
    RecallResultSerializer,
    ReflectionRequestSerializer,
    ReflectionResultSerializer,
)
from memory.recall.services import reflection_create_if_due, reflection_state


class RecallViewSet(AgentActionViewSet):
    @extend_schema(
        summary="Recall what an agent remembers of a run (episodic or salience)",
        request=RecallRequestSerializer,
        # Answers 200: a read (or an assembly) sent as POST, nothing is created.
        responses={200: RecallResultSerializer},
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
