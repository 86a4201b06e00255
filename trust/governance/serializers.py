"""Input and output shapes of the governance API (trust.governance.api)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from trust.governance.models import GamingFlag, RubricCriterion, RubricProposal, RubricVersion
from trust.governance.selectors import BUCKETS
from trust.governance.services import MAX_SEED, CriterionDraft


@extend_schema_field(OpenApiTypes.INT)
class RawSeedField(serializers.Field[Any, Any, Any, Any]):
    """Passed through as sent: trust.governance.services refuses booleans, floats and strings itself
    (400 ``invalid_seed``), where an IntegerField would quietly turn ``1.0`` or ``"1"`` into 1."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class DevilsAdvocateRequestSerializer(serializers.Serializer[Any]):
    candidates = serializers.ListField(
        child=serializers.CharField(max_length=200),
        allow_empty=True,  # the service answers an empty list with its own code
        max_length=1000,
        help_text="Agent names to choose among.",
    )
    seed = RawSeedField(
        required=False,
        allow_null=True,
        default=None,
        help_text=f"An integer from 0 to {MAX_SEED} for a reproducible pick; omitted, one is drawn"
        " and reported.",
    )


class DevilsAdvocatePickSerializer(serializers.Serializer[Any]):
    picked = serializers.CharField(source="picked.name")
    picked_id = serializers.IntegerField(source="picked.pk")
    candidates = serializers.ListField(child=serializers.CharField())
    eligible = serializers.ListField(
        child=serializers.CharField(),
        help_text="Candidates above the trust floor and out of probation (all of them when "
        "none is: fallback).",
    )
    weights = serializers.ListField(
        child=serializers.FloatField(), help_text="weights[i] is eligible[i]'s trust score."
    )
    seed = serializers.IntegerField()
    fallback = serializers.BooleanField()
    event_seq = serializers.IntegerField(help_text="The trust.devils_advocate_picked event.")


class GamingFlagSerializer(serializers.ModelSerializer[GamingFlag]):
    agent = serializers.CharField(source="agent.name", read_only=True)

    class Meta:
        model = GamingFlag
        fields = [
            "id",
            "agent",
            "agent_id",
            "created_at",
            "entropy_bits",
            "trust_score",
            "dissents_considered",
            "citation_counts",
            "status",
            "reviewed_by",
            "reviewed_at",
            "review_note",
        ]
        read_only_fields = fields


class GamingFlagReviewSerializer(serializers.Serializer[Any]):
    status = serializers.ChoiceField(
        choices=[GamingFlag.Status.DISMISSED, GamingFlag.Status.CONFIRMED]
    )
    note = serializers.CharField(required=False, default="", allow_blank=True, max_length=10000)


class RubricCriterionSerializer(serializers.ModelSerializer[RubricCriterion]):
    class Meta:
        model = RubricCriterion
        fields = ["name", "description"]


class RubricVersionSerializer(serializers.ModelSerializer[RubricVersion]):
    criteria = RubricCriterionSerializer(many=True, read_only=True)
    version = serializers.IntegerField(source="number", read_only=True)

    class Meta:
        model = RubricVersion
        fields = ["version", "created_at", "created_by", "note", "proposal", "criteria"]
        read_only_fields = fields


class RubricVersionCreateSerializer(serializers.Serializer[Any]):
    criteria = RubricCriterionSerializer(many=True, help_text="The whole new rubric.")
    note = serializers.CharField(required=False, default="", allow_blank=True, max_length=10000)

    def drafts(self) -> list[CriterionDraft]:
        return [
            CriterionDraft(name=c["name"], description=c.get("description", ""))
            for c in self.validated_data["criteria"]
        ]


class RubricProposalSerializer(serializers.ModelSerializer[RubricProposal]):
    class Meta:
        model = RubricProposal
        fields = [
            "id",
            "override",
            "proposed_by",
            "proposer_trust",
            "created_at",
            "action",
            "criterion",
            "description",
            "rationale",
            "base_version",
            "status",
            "decided_by",
            "decided_at",
            "decision_note",
            "result_version",
        ]
        read_only_fields = fields


class RubricProposalCreateSerializer(serializers.Serializer[Any]):
    override = serializers.IntegerField(
        min_value=1, help_text="The override whose decision maker proposes the change."
    )
    action = serializers.ChoiceField(choices=RubricProposal.Action.choices)
    criterion = serializers.CharField(max_length=100)
    description = serializers.CharField(
        required=False, default="", allow_blank=True, max_length=10000
    )
    rationale = serializers.CharField(
        required=False, default="", allow_blank=True, max_length=10000
    )


class RubricProposalDecisionSerializer(serializers.Serializer[Any]):
    note = serializers.CharField(required=False, default="", allow_blank=True, max_length=10000)


class MetricsQuerySerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(required=False, max_length=200, help_text="Agent name")
    since = serializers.DateTimeField(required=False, help_text="Inclusive; default 90 days ago")
    until = serializers.DateTimeField(required=False, help_text="Exclusive; default now")
    bucket = serializers.ChoiceField(choices=BUCKETS, default="week")


class MetricCountsSerializer(serializers.Serializer[Any]):
    dissents = serializers.IntegerField()
    dissents_known = serializers.IntegerField(help_text="Dissents whose impact is known.")
    dissents_impactful = serializers.IntegerField()
    dissent_impact_rate = serializers.FloatField(allow_null=True)
    overrides = serializers.IntegerField()
    overrides_regretted = serializers.IntegerField()
    regret_rate = serializers.FloatField(allow_null=True)
    escalations_changed = serializers.IntegerField(
        help_text="Overrides whose human decision differs from the agent's output."
    )
    escalations_useful = serializers.IntegerField(help_text="Of those, the ones not regretted.")
    escalation_usefulness = serializers.FloatField(allow_null=True)


class MetricBucketSerializer(serializers.Serializer[Any]):
    start = serializers.DateTimeField()
    counts = MetricCountsSerializer()


class TrustMetricsSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(source="agent.name", allow_null=True, default=None)
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    bucket = serializers.CharField()
    buckets = MetricBucketSerializer(many=True)
    totals = MetricCountsSerializer()
