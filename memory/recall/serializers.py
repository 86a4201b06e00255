"""Request and response shapes of recall and reflection (``memory.recall.api``)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class AgentRunSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(
        max_length=200,
        required=False,
        help_text="Agent name. An agent-scoped key may omit it (it recalls as itself).",
    )
    run_id = serializers.CharField(max_length=200)


class RecallRequestSerializer(AgentRunSerializer):
    mode = serializers.ChoiceField(choices=["episodic", "salience"], default="episodic")
    query = serializers.CharField(required=False, default="", allow_blank=True, max_length=10000)
    current_turn = serializers.IntegerField(required=False, min_value=0)
    top_k = serializers.IntegerField(required=False, min_value=1, max_value=200)
    max_recent = serializers.IntegerField(required=False, min_value=1, max_value=200)


class RecallItemSerializer(serializers.Serializer[Any]):
    seq = serializers.IntegerField()
    turn = serializers.IntegerField()
    kind = serializers.CharField()
    actor = serializers.CharField()
    text = serializers.CharField()
    score = serializers.FloatField(allow_null=True)
    relevance = serializers.FloatField(allow_null=True)
    recency = serializers.FloatField(allow_null=True)
    importance = serializers.FloatField(allow_null=True)


class RecallResultSerializer(serializers.Serializer[Any]):
    mode = serializers.CharField()
    agent = serializers.CharField()
    run_id = serializers.CharField()
    prompt = serializers.CharField(help_text="The recalled lines, ready for a prompt.")
    semantic = serializers.BooleanField(help_text="Whether relevance came from the semantic index.")
    semantic_note = serializers.CharField()
    weights = serializers.DictField(child=serializers.FloatField())
    items = RecallItemSerializer(many=True)


class ReflectionRequestSerializer(AgentRunSerializer):
    force = serializers.BooleanField(default=False, help_text="Reflect even if none is due.")


class ReflectionResultSerializer(serializers.Serializer[Any]):
    created = serializers.BooleanField()
    qualifying_events = serializers.IntegerField()
    reflections_made = serializers.IntegerField()
    threshold = serializers.IntegerField()
    event = serializers.DictField(allow_null=True)
