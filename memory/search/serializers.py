"""Request and response shapes of memory search (``POST /api/v1/memories/search/``)."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from config.api import ApiError
from memory.embeddings.backends import embedding_problem, unit_vector
from memory.episodic.validity import validity_chosen
from memory.search.filter_schema import FILTER_REF
from memory.search.filters import MemoryFilter, filter_parse
from memory.search.ranking import SOURCES, SearchHit, SearchWeights


# The shape of ``weights`` for the schema; ``validate_weights`` checks it with its own code.
class SearchWeightsSerializer(serializers.Serializer[Any]):
    """Ranking weights, each 0 to 100; an omitted one keeps the deployment's default."""

    similarity = serializers.FloatField(required=False, min_value=0, max_value=100)
    recency = serializers.FloatField(required=False, min_value=0, max_value=100)
    importance = serializers.FloatField(required=False, min_value=0, max_value=100)
    source_priority = serializers.FloatField(required=False, min_value=0, max_value=100)


@extend_schema_field(FILTER_REF)
class MemoryFilterField(serializers.JSONField):
    pass


@extend_schema_field(SearchWeightsSerializer)
class SearchWeightsField(serializers.JSONField):
    pass


class SearchRequestSerializer(serializers.Serializer[Any]):
    """A search: every value is checked here, with a code of its own, before anything runs."""

    agent = serializers.CharField(
        max_length=200,
        required=False,
        help_text="Agent name. An agent-scoped key may omit it (it searches as itself).",
    )
    query = serializers.CharField(max_length=10000, allow_blank=True, trim_whitespace=False)
    top_k = serializers.IntegerField(required=False, default=5)
    sources = serializers.ListField(
        child=serializers.CharField(), required=False, help_text=f"Subset of {list(SOURCES)}."
    )
    filters = MemoryFilterField(
        required=False,
        help_text="Narrows the agent's own memories (the other sources ignore it): fields, "
        "operators and AND / OR / NOT (docs/filters.md).",
    )
    weights = SearchWeightsField(
        required=False,
        help_text="Override any of similarity, recency, importance, source_priority.",
    )
    threshold = serializers.FloatField(required=False, allow_null=True)
    include_superseded = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Also the agent's memories whose validity ended (superseded ones).",
    )
    as_of = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="Only the agent's memories valid at this moment (what held then); not with "
        "include_superseded.",
    )
    embedding = serializers.ListField(
        child=serializers.FloatField(),
        required=False,
        help_text="The query's vector, when the caller has already embedded it with this "
        "deployment's embedding model; the service then does not embed the query itself.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["validity"] = validity_chosen(
            as_of=attrs.pop("as_of", None),
            include_superseded=attrs.pop("include_superseded", False),
        )
        return attrs

    def validate_query(self, value: str) -> str:
        if not value.strip():
            raise ApiError(code="empty_query", message="The query is empty or only whitespace.")
        return value

    def validate_top_k(self, value: int) -> int:
        if not 1 <= value <= settings.SEARCH_MAX_TOP_K:
            raise ApiError(
                code="invalid_top_k",
                message=f"top_k must be between 1 and {settings.SEARCH_MAX_TOP_K}.",
            )
        return value

    def validate_sources(self, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(SOURCES))
        if unknown or not value:
            raise ApiError(
                code="invalid_source",
                message=f"sources must be a non-empty subset of {', '.join(SOURCES)}.",
                details={"unknown": unknown},
            )
        return value

    def validate_embedding(self, value: list[float]) -> list[float]:
        problem = embedding_problem(value)
        if problem is not None:
            raise ApiError(code=problem[0], message=problem[1])
        unit = unit_vector(value)
        assert unit is not None  # embedding_problem refuses what has no direction
        return unit

    def validate_threshold(self, value: float | None) -> float | None:
        if value is not None and not -1.0 <= value <= 1.0:
            raise ApiError(code="invalid_threshold", message="threshold must be in [-1, 1].")
        return value

    def validate_filters(self, value: Any) -> MemoryFilter:
        return filter_parse(value)

    def validate_weights(self, value: Any) -> SearchWeights:
        defaults = SearchWeights.configured()
        names = set(asdict(defaults))
        if (
            not isinstance(value, dict)
            or set(value) - names
            or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 100
                for v in value.values()
            )
        ):
            raise ApiError(
                code="invalid_weights",
                message="weights must be an object of non-negative numbers named "
                f"{', '.join(sorted(names))}.",
            )
        return replace(defaults, **{name: float(v) for name, v in value.items()})


class SearchHitSerializer(serializers.Serializer[Any]):
    source = serializers.ChoiceField(choices=list(SOURCES))  # type: ignore[assignment]
    id = serializers.IntegerField(
        help_text="Memory id, event seq or knowledge-base chunk id, by source."
    )
    content = serializers.CharField()
    score = serializers.FloatField()
    breakdown = serializers.DictField(
        child=serializers.FloatField(),
        help_text="similarity, recency, importance and source_priority (each in [0, 1]), "
        "plus the evidence behind similarity: cosine and keyword.",
    )
    contributions = serializers.DictField(
        child=serializers.FloatField(), help_text="weight * term; they add up to score."
    )
    details = serializers.DictField(help_text="Source-specific fields.")


class SearchResultSerializer(serializers.Serializer[Any]):
    results = SearchHitSerializer(many=True, source="hits")
    semantic = serializers.BooleanField(
        help_text="False when the embedder was unavailable and keywords alone ranked."
    )
    took_ms = serializers.FloatField()
    candidates = serializers.IntegerField()

    def to_representation(self, instance: Any) -> dict[str, Any]:
        """What the fields above render, written out: DRF built and bound a field object for
        every value of every hit, which cost a search more CPU than rendering the JSON. The
        fields stay for the schema; tests/memory/test_search_serialization.py holds the two
        equal."""
        return {
            "results": [_hit_representation(hit) for hit in instance.hits],
            "semantic": bool(instance.semantic),
            "took_ms": float(instance.took_ms),
            "candidates": int(instance.candidates),
        }


def _floats(values: dict[str, Any]) -> dict[str, float | None]:
    return {str(key): None if value is None else float(value) for key, value in values.items()}


def _hit_representation(hit: SearchHit) -> dict[str, Any]:
    return {
        "source": str(hit.source),
        "id": int(hit.id),
        "content": str(hit.content),
        "score": float(hit.score),
        "breakdown": _floats(hit.breakdown),
        "contributions": _floats(hit.contributions),
        "details": {str(key): value for key, value in hit.details.items()},
    }
