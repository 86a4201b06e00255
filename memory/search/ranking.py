"""Ranking of search candidates from every source: fusion of the evidence, then the score."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

AGENT_MEMORY = "agent_memory"
AUDIT_LOG = "audit_log"
WORKFLOW_STEPS = "workflow_steps"
KNOWLEDGE_BASE = "knowledge_base"
SOURCES = (AGENT_MEMORY, AUDIT_LOG, WORKFLOW_STEPS, KNOWLEDGE_BASE)
SOURCE_PRIORITY = {AGENT_MEMORY: 1.0, AUDIT_LOG: 0.8, WORKFLOW_STEPS: 0.6, KNOWLEDGE_BASE: 0.5}


# Fusion of the two kinds of evidence, chosen on LoCoMo dev (docs/retrieval-research.md).
DENSE_WEIGHT = 0.5
NEIGHBOUR_BOOST = 0.3


@dataclass(frozen=True)
class SearchWeights:
    similarity: float = 0.5
    recency: float = 0.2
    importance: float = 0.2
    source_priority: float = 0.1

    @classmethod
    def configured(cls) -> SearchWeights:
        similarity, recency, importance, priority = settings.SEARCH_WEIGHTS
        return cls(similarity, recency, importance, priority)


@dataclass
class Candidate:
    """One possible result, before ranking. ``keyword`` is the source's raw keyword score."""

    source: str
    id: int
    content: str
    cosine: float | None
    keyword: float
    moment: datetime
    importance: float
    content_hash: str
    details: dict[str, Any]
    previous_id: int | None = None
    next_id: int | None = None
    # Whether the candidate's own text (not only its session neighbours') shares a query word.
    own_match: bool = True
    relevance: float = 0.0


@dataclass(frozen=True)
class SearchHit:
    source: str
    id: int
    content: str
    score: float
    breakdown: dict[str, float]
    contributions: dict[str, float]
    details: dict[str, Any]


def minmax(values: Sequence[float]) -> list[float]:
    """Scale the values to [0, 1] over the candidates of one call.

    When they are all equal nothing tells them apart: all 1 if they are positive (every one is
    evidence), else all 0. Equal means ``math.isclose``, so float noise between scores that are
    the same is never stretched over the whole range.
    """
    if not values:
        return []
    low, high = min(values), max(values)
    if math.isclose(high, low):
        return [1.0 if high > 0 else 0.0 for _ in values]
    return [(value - low) / (high - low) for value in values]


def semantic_evidence(cosines: Sequence[float | None]) -> tuple[list[float], float]:
    """The cosines min-max normalised, and the share of the fusion they get.

    A candidate without a vector counts as the lowest cosine of the call. The share is
    ``DENSE_WEIGHT``, or 0 when no candidate has a vector: keywords alone rank.
    """
    present = [cosine for cosine in cosines if cosine is not None]
    floor = min(present, default=0.0)
    dense = minmax([cosine if cosine is not None else floor for cosine in cosines])
    return dense, DENSE_WEIGHT if present else 0.0


def hybrid(dense: float, keyword: float, semantic_weight: float) -> float:
    """One candidate's fused evidence in [0, 1] from its normalised cosine and keyword score."""
    return semantic_weight * dense + (1 - semantic_weight) * keyword


def fuse(candidates: list[Candidate]) -> None:
    """Set each candidate's relevance in [0, 1] from its semantic and keyword evidence.

    Cosines are normalised over every candidate (one embedder made them all), keyword scores
    per source (the sources score keywords differently); then 0.3 of the better session
    neighbour's fused evidence is added, rescaled to [0, 1].
    """
    dense, semantic_weight = semantic_evidence([c.cosine for c in candidates])
    keyword = [0.0] * len(candidates)
    for source in SOURCES:
        positions = [i for i, c in enumerate(candidates) if c.source == source]
        for i, value in zip(
            positions, minmax([candidates[i].keyword for i in positions]), strict=True
        ):
            keyword[i] = value
    fused = {
        (c.source, c.id): hybrid(d, k, semantic_weight)
        for c, d, k in zip(candidates, dense, keyword, strict=True)
    }
    for c in candidates:
        around = [
            fused.get((c.source, neighbour), 0.0)
            for neighbour in (c.previous_id, c.next_id)
            if neighbour is not None
        ]
        c.relevance = (fused[(c.source, c.id)] + NEIGHBOUR_BOOST * max(around, default=0.0)) / (
            1 + NEIGHBOUR_BOOST
        )


def recency(moment: datetime, now: datetime) -> float:
    """1 now, halving every ``SEARCH_RECENCY_HALF_LIFE_DAYS``."""
    age_days = max((now - moment).total_seconds(), 0.0) / 86400
    return float(0.5 ** (age_days / settings.SEARCH_RECENCY_HALF_LIFE_DAYS))


def ranked(
    candidates: list[Candidate], *, weights: SearchWeights, threshold: float, now: datetime
) -> list[SearchHit]:
    hits: dict[str, SearchHit] = {}
    for c in candidates:
        # Weak on both kinds of evidence: neither close in meaning nor sharing a word.
        if not (c.keyword > 0 and c.own_match) and (c.cosine is None or c.cosine < threshold):
            continue
        breakdown = {
            "similarity": round(c.relevance, 4),
            "recency": round(recency(c.moment, now), 4),
            "importance": round(c.importance, 4),
            "source_priority": SOURCE_PRIORITY[c.source],
        }
        contributions = {
            term: round(getattr(weights, term) * value, 4) for term, value in breakdown.items()
        }
        hit = SearchHit(
            source=c.source,
            id=c.id,
            content=c.content,
            score=round(sum(contributions.values()), 4),
            breakdown={
                **breakdown,
                "cosine": round(c.cosine, 4) if c.cosine is not None else 0.0,
                "keyword": round(c.keyword, 4),
            },
            contributions=contributions,
            details=c.details,
        )
        kept = hits.get(c.content_hash)
        if kept is None or (hit.score, -SOURCES.index(hit.source)) > (
            kept.score,
            -SOURCES.index(kept.source),
        ):
            hits[c.content_hash] = hit
    return sorted(hits.values(), key=lambda h: (-h.score, SOURCES.index(h.source), h.id))
