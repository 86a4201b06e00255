"""``POST /api/v1/context/``: an agent's working memory, assembled within a token budget."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import ApiError
from ledger.api import IDEMPOTENCY_PARAMETER
from memory.context.services import QUERY_MAX_CHARS, context_assemble
from memory.episodic.api import AgentActionViewSet

MAX_BUDGET_TOKENS = 10_000_000
SKILL_TITLE_MAX_CHARS = 300


class ContextRequestSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(
        max_length=200,
        required=False,
        help_text="Agent name. An agent-scoped key may omit it (it asks as itself).",
    )
    token_budget = serializers.IntegerField(help_text="The most tokens the context may count.")
    system_prompt = serializers.CharField(allow_blank=True, default="", trim_whitespace=False)
    turns = serializers.ListField(
        child=serializers.JSONField(),
        default=list,
        help_text="The conversation so far, oldest first: [{role, content}].",
    )
    tool_results = serializers.ListField(
        child=serializers.JSONField(),
        default=list,
        help_text="Strings, or JSON values (shown as JSON).",
    )
    query = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=QUERY_MAX_CHARS,
        help_text="What to retrieve memories and KB chunks by; default: the last user turn.",
    )
    skill = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="A published skill's id or exact title, instead of the agent's skills.",
    )
    run_id = serializers.CharField(
        max_length=200, default="", allow_blank=True, help_text="Logged with any truncation."
    )

    def validate_token_budget(self, value: int) -> int:
        if not 1 <= value <= MAX_BUDGET_TOKENS:
            raise ApiError(
                code="invalid_budget",
                message=f"token_budget must be between 1 and {MAX_BUDGET_TOKENS}.",
            )
        return value

    def validate_turns(self, value: list[Any]) -> list[dict[str, str]]:
        for index, turn in enumerate(value):
            if (
                not isinstance(turn, dict)
                or not isinstance(turn.get("role"), str)
                or not turn["role"]
                or not isinstance(turn.get("content"), str)
            ):
                raise ApiError(
                    code="invalid_turn",
                    message=f"Turn {index} needs a non-empty string 'role' and a string 'content'.",
                    details={"index": index},
                )
        return [{"role": turn["role"], "content": turn["content"]} for turn in value]

    def validate_skill(self, value: Any) -> int | str | None:
        valid = (
            value is None
            or (isinstance(value, int) and not isinstance(value, bool) and value > 0)
            or (isinstance(value, str) and 0 < len(value.strip()) <= SKILL_TITLE_MAX_CHARS)
        )
        if not valid:
            raise ApiError(
                code="invalid_skill",
                message="skill must be a document id (a positive integer) or a title.",
            )
        return value  # type: ignore[no-any-return]


class ContextSkillSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    title = serializers.CharField()


class ContextMemorySerializer(serializers.Serializer[Any]):
    source = serializers.CharField(  # type: ignore[assignment]
        help_text="agent_memory, audit_log or workflow_steps."
    )
    id = serializers.IntegerField(help_text="Memory id, or event seq for the ledger's sources.")
    score = serializers.FloatField()


class ContextChunkSerializer(serializers.Serializer[Any]):
    chunk_id = serializers.IntegerField()
    document_id = serializers.IntegerField()
    title = serializers.CharField()
    score = serializers.FloatField()


class ContextTruncationSerializer(serializers.Serializer[Any]):
    step = serializers.CharField()
    description = serializers.CharField()
    tokens_before = serializers.IntegerField()
    tokens_after = serializers.IntegerField()
    tokens_removed = serializers.IntegerField()
    sources = serializers.DictField(
        child=serializers.IntegerField(), help_text="How many items each section lost."
    )


class ContextResultSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(source="agent.name")
    query = serializers.CharField(help_text="What retrieval searched by (empty: nothing).")
    semantic = serializers.BooleanField(
        help_text="False when the embedder was unavailable and keywords alone retrieved."
    )
    messages = serializers.ListField(
        child=serializers.DictField(child=serializers.CharField()),
        source="working_memory.messages",
        help_text="[{role, content}] in order: system prompt, skills, memories, KB chunks, "
        "turns, tool results.",
    )
    total_tokens = serializers.IntegerField(source="working_memory.total_tokens")
    budget_tokens = serializers.IntegerField(source="working_memory.budget_tokens")
    section_tokens = serializers.DictField(
        child=serializers.IntegerField(), source="working_memory.section_tokens"
    )
    truncations = ContextTruncationSerializer(many=True, source="working_memory.truncations")
    skills = ContextSkillSerializer(many=True)
    memories = ContextMemorySerializer(many=True, help_text="Those in the prompt, best first.")
    kb_chunks = ContextChunkSerializer(many=True, help_text="Those in the prompt, best first.")


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
        parameters=[IDEMPOTENCY_PARAMETER],
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
