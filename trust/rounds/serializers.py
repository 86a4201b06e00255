"""What the endpoints of rounds, dissents and overrides (trust.rounds.api) read and answer."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from trust.rounds.models import ArtifactVersion, Dissent, Override, Round
from trust.rounds.policies import NOTE_MAX_CHARS


# Texts are checked by the services (empty_text, text_too_long), so the codes are the same for
# the API, the import and the browser.
def _text() -> serializers.CharField:
    return serializers.CharField(allow_blank=True, trim_whitespace=False)


class ArtifactVersionSerializer(serializers.ModelSerializer[ArtifactVersion]):
    class Meta:
        model = ArtifactVersion
        fields = ["number", "content", "content_hash", "author", "created_at"]


class RoundSerializer(serializers.ModelSerializer[Round]):
    participants = serializers.SerializerMethodField()
    versions = ArtifactVersionSerializer(many=True, read_only=True)

    class Meta:
        model = Round
        fields = [
            "id",
            "round_id",
            "run_id",
            "created_at",
            "participants",
            "final_output",
            "finalized_at",
            "finalized_by",
            "output",
            "output_hash",
            "output_version",
            "versions",
        ]

    def get_participants(self, round_: Round) -> list[str]:
        return [p.agent.name for p in round_.participants.all()]


class RoundPostSerializer(serializers.Serializer[Any]):
    round_id = serializers.CharField(max_length=200)
    run_id = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    participants = serializers.ListField(
        child=serializers.CharField(max_length=200), default=list, max_length=1000
    )


class RoundFinalizeSerializer(serializers.Serializer[Any]):
    final_output = _text()


class RoundVersionSerializer(serializers.Serializer[Any]):
    content = _text()
    author = serializers.CharField(
        max_length=200, required=False, help_text="Who wrote it; the caller by default."
    )


class DissentSerializer(serializers.ModelSerializer[Dissent]):
    agent = serializers.CharField(source="agent.name", read_only=True)

    class Meta:
        model = Dissent
        fields = [
            "id",
            "agent",
            "round_id",
            "occurred_at",
            "created_at",
            "context",
            "text",
            "rubric_citations",
            "rubric_version",
            "length_score",
            "citation_score",
            "novelty",
            "novelty_known",
            "depth_score",
            "impact",
            "feedback_incorporated",
            "impact_set_at",
            "imported",
        ]


class DissentLogSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(
        max_length=200, required=False, help_text="Agent name; an agent-scoped key may omit it."
    )
    text = _text()
    round_id = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    context = serializers.DictField(required=False, default=dict)  # type: ignore[assignment]
    rubric_citations = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, default=list, max_length=50
    )
    occurred_at = serializers.DateTimeField(required=False)


class DissentImpactSerializer(serializers.Serializer[Any]):
    impact = serializers.BooleanField()
    feedback_incorporated = serializers.BooleanField(required=False, allow_null=True, default=None)


class OverrideSerializer(serializers.ModelSerializer[Override]):
    agent = serializers.CharField(source="agent.name", read_only=True)

    class Meta:
        model = Override
        fields = [
            "id",
            "agent",
            "round_id",
            "occurred_at",
            "created_at",
            "context",
            "agent_output",
            "human_decision",
            "decided_by",
            "regret",
            "auto_check_deadline",
            "reverted_by",
            "reverted_at",
            "revert_reason",
            "revert_note",
        ]


class OverrideLogSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(max_length=200)
    agent_output = _text()
    human_decision = _text()
    decided_by = serializers.CharField(
        max_length=200, required=False, help_text="Who decided; the caller by default."
    )
    round_id = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    context = serializers.DictField(required=False, default=dict)  # type: ignore[assignment]
    occurred_at = serializers.DateTimeField(required=False)


class OverrideRevertSerializer(serializers.Serializer[Any]):
    reverted_by = serializers.CharField(
        max_length=200, required=False, help_text="Who reverted it; the caller by default."
    )
    note = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        help_text=f"Why it is regretted (at most {NOTE_MAX_CHARS} characters).",
    )


class OverrideRevertWithdrawSerializer(serializers.Serializer[Any]):
    note = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        help_text=f"Why the revert is taken back (at most {NOTE_MAX_CHARS} characters).",
    )
