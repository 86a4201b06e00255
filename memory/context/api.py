"""``POST /api/v1/context/``: an agent's working memory, assembled within a token budget."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from memory.context.serializers import ContextRequestSerializer, ContextResultSerializer
from memory.context.services import context_assemble
from memory.episodic.api import AgentActionViewSet


class ContextViewSet(AgentActionViewSet):
    @extend_schema(
        summary="Assemble an agent's working memory within a token budget",
        description="Retrieves the five best memories (memory search over the agent's "
        "memories, audit log and workflow steps) and the five best knowledge-base chunks, adds "
        "the agent's skills, and lays out system prompt, skills, memories, KB chunks, turns and "
        "tool results. Over budget it summarises turns older than the last 20, then keeps 3 "
        "memories, then 2 KB chunks, logging each cut as a context.truncated event; if it "
        "still does not fit: 422 context_budget_exceeded.",
        request=ContextRequestSerializer,
        # Answers 200: a read (or an assembly) sent as POST, nothing is created.
        responses={200: ContextResultSerializer},
    )
    def create(self, request: Request) -> Response:
        serializer = ContextRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        assembled = context_assemble(
            agent=self.agent_named(data.get("agent")),
            budget_tokens=data["token_budget"],
            system_prompt=data["system_prompt"],
            turns=data["turns"],
            tool_results=data["tool_results"],
            actor=self.principal.actor,
            query=data.get("query"),
            skill=data.get("skill"),
            run_id=data["run_id"],
        )
        return Response(ContextResultSerializer(assembled).data)
