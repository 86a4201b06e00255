"""Request and response shapes of working memory (``memory.context.api``)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from config.api import ApiError
from memory.context.services import QUERY_MAX_CHARS

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
