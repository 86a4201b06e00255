"""What the trust endpoints (trust.scores.api) read and answer."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from trust.rounds.serializers import DissentSerializer, OverrideSerializer


class TrustAgentSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    trust_score = serializers.FloatField()
    rounds_participated = serializers.IntegerField()
    probation_until = serializers.DateTimeField(allow_null=True)
    on_probation = serializers.BooleanField()
    dissents = serializers.IntegerField()
    overrides = serializers.IntegerField()


class TrustHistoryEntrySerializer(serializers.Serializer[Any]):
    timestamp = serializers.DateTimeField()
    score = serializers.FloatField()
    reason = serializers.CharField()


class LongTermStatsSerializer(serializers.Serializer[Any]):
    avg_dissent_depth_last_90d = serializers.FloatField(allow_null=True)
    dissent_impact_ratio_last_90d = serializers.FloatField(allow_null=True)
    total_overrides = serializers.IntegerField()
    regret_rate_last_90d = serializers.FloatField(allow_null=True)
    total_dissents = serializers.IntegerField()


class TrustDetailSerializer(TrustAgentSerializer):
    components = serializers.DictField(
        help_text="The score's terms (trust.scores.scoring.TrustBreakdown)."
    )
    history = TrustHistoryEntrySerializer(many=True)
    long_term_stats = LongTermStatsSerializer()
    recent_dissents = DissentSerializer(many=True)
    recent_overrides = OverrideSerializer(many=True)


class TrustRecomputeSerializer(serializers.Serializer[Any]):
    agents = serializers.ListField(
        child=serializers.CharField(max_length=200),
        required=False,
        help_text="Agent names; all of the tenant's agents by default.",
    )
