"""Ranking of search candidates from every source: fusion of the evidence, then the score."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

from memory.search.temporal import QueryTime

AGENT_MEMORY = "agent_memory"
AUDIT_LOG = "audit_log"
WORKFLOW_STEPS = "workflow_steps"
KNOWLEDGE_BASE = "knowledge_base"
SOURCES = (AGENT_MEMORY, AUDIT_LOG, WORKFLOW_STEPS, KNOWLEDGE_BASE)
SOURCE_PRIORITY = {AGENT_MEMORY: 1.0, AUDIT_LOG: 0.8, WORKFLOW_STEPS: 0.6, KNOWLEDGE_BASE: 0.5}


@dataclass(frozen=True)
class RankingKnobs:
    """How the evidence is fused. The service uses ``configured()`` (settings, defaults chosen
    by leave-one-conversation-out on LoCoMo dev: bench/locomo_research.py --loco,
    docs/retrieval-research.md); the dataclass's own defaults leave the time evidence and the
    feedback off.

    * ``dense_weight``: the cosine's share of the fusion (the keyword score gets the rest);
    * ``neighbour_boost``: share of the better session neighbour's evidence added;
    * ``time_boost``: added for a question asking *when* to a memory whose text names a time;
    * ``period_boost``: added to a memory that occurred in a period the query names;
    * ``relevance_gate``: recency, importance and source priority count in proportion to the
      relevance, so they order relevant results but never lift an irrelevant one;
    * ``answer_boost``: added to the neighbour boost's share for the turn after a memory that asks
      a question (its likely answer);
    * ``question_penalty``: taken from the relevance of a memory that asks a question (its text
      ends with one): such a turn points at its answer, the next turn, which it still lifts
      through the neighbour boost; ranked as if it were the answer, it took a third of the
      top 10 on LoCoMo dev while one evidence turn in eight is a question;
    * ``own_line_weight``: how much more an occurrence of a query word counts in a memory's own
      line than in its session neighbours' lines of its keyword document (BM25F: the weighted
      counts go through BM25's saturation). The window lets a question find the turn beside
      the one that names its words; at weight 1 the five turns of a window score nearly alike,
      and the turn that says it does not stand out from its neighbours;
    * ``feedback_weight``: pseudo-relevance feedback (Rocchio on the vectors): a second
      ranking adds this times each candidate's mean cosine to the first ranking's
      ``feedback_docs`` best memories to its own cosine, so evidence phrased like the best
      matches (another session's part of a multi-hop answer) moves up. No second embedding:
      the cosines come from the stored vectors (memory.search.legs.memory_feedback).
    """

    dense_weight: float = 0.5
    neighbour_boost: float = 0.3
    answer_boost: float = 0.0
    time_boost: float = 0.0
    period_boost: float = 0.0
    relevance_gate: bool = True
    question_penalty: float = 0.0
    own_line_weight: float = 1.0
    feedback_weight: float = 0.0
    feedback_docs: int = 3

    @classmethod
    def configured(cls) -> RankingKnobs:
        return cls(
            dense_weight=settings.SEARCH_DENSE_WEIGHT,
            neighbour_boost=settings.SEARCH_NEIGHBOUR_BOOST,
            answer_boost=settings.SEARCH_ANSWER_BOOST,
            time_boost=settings.SEARCH_TIME_BOOST,
            period_boost=settings.SEARCH_PERIOD_BOOST,
            relevance_gate=settings.SEARCH_RELEVANCE_GATE,
            question_penalty=settings.SEARCH_QUESTION_PENALTY,
            own_line_weight=settings.SEARCH_OWN_LINE_WEIGHT,
            feedback_weight=settings.SEARCH_FEEDBACK_WEIGHT,
            feedback_docs=settings.SEARCH_FEEDBACK_DOCS,
        )


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


BM25_K1 = 1.2
BM25_B = 0.75


def bm25_idf(*, documents: int, df: int) -> float:
    return math.log(1 + (documents - df + 0.5) / (df + 0.5))


class KeywordTerms:
    """A memory's Okapi BM25 ingredients for the query's lexemes, its own line's occurrences
    apart from its neighbours' (memory.search.keyword_index: the own line is weight A), so the
    score can weigh them differently (BM25F, ``RankingKnobs.own_line_weight``).

    ``idfs``, ``own`` and ``window`` run over the query's lexemes in the same order: each one's
    IDF, its occurrences in the memory's own line, and in the whole document (own line
    included). ``length_ratio``: the document's length over the agent's mean.
    """

    __slots__ = ("_scores", "idfs", "length_ratio", "own", "window")

    def __init__(
        self,
        idfs: Sequence[float],
        own: Sequence[int],
        window: Sequence[int],
        length_ratio: float,
    ) -> None:
        self.idfs, self.own, self.window = tuple(idfs), tuple(own), tuple(window)
        self.length_ratio = length_ratio
        # A ranking asks once per weight; the research grid asks hundreds of times.
        self._scores: dict[float, float] = {}

    def score(self, own_line_weight: float) -> float:
        if own_line_weight not in self._scores:
            saturation = BM25_K1 * (1 - BM25_B + BM25_B * self.length_ratio)
            total = 0.0
            for idf, own, window in zip(self.idfs, self.own, self.window, strict=True):
                count = window + (own_line_weight - 1) * own
                if count > 0:
                    total += idf * count * (BM25_K1 + 1) / (count + saturation)
            self._scores[own_line_weight] = total
        return self._scores[own_line_weight]


@dataclass
class Candidate:
    """One possible result, before ranking. ``keyword`` is the source's raw keyword score; for
    an agent memory ``fuse`` sets it from ``keyword_terms`` under the ranking's knobs."""

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
    # Whether the candidate's own text names a time ("yesterday", "in May", "two weeks").
    mentions_time: bool = False
    # Whether the candidate's own text ends with a question ("What pet do you have?").
    asks_question: bool = False
    # Mean cosine to the first ranking's best memories (pseudo-relevance feedback), if asked.
    feedback: float | None = None
    keyword_terms: KeywordTerms | None = None
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


def semantic_evidence(
    cosines: Sequence[float | None], dense_weight: float
) -> tuple[list[float], float]:
    """The cosines min-max normalised, and the share of the fusion they get.

    A candidate without a vector counts as the lowest cosine of the call. The share is
    ``dense_weight``, or 0 when no candidate has a vector: keywords alone rank.
    """
    present = [cosine for cosine in cosines if cosine is not None]
    floor = min(present, default=0.0)
    dense = minmax([cosine if cosine is not None else floor for cosine in cosines])
    return dense, dense_weight if present else 0.0


def hybrid(dense: float, keyword: float, semantic_weight: float) -> float:
    """One candidate's fused evidence in [0, 1] from its normalised cosine and keyword score."""
    return semantic_weight * dense + (1 - semantic_weight) * keyword


def fuse(
    candidates: list[Candidate],
    knobs: RankingKnobs | None = None,
    when: QueryTime | None = None,
) -> None:
    """Set each candidate's relevance in [0, 1] from its semantic and keyword evidence.

    Cosines are normalised over every candidate (one embedder made them all), keyword scores
    per source (the sources score keywords differently); then a share of the better session
    neighbour's fused evidence is added (a larger share from a preceding question: the answer
    boost), and the time evidence (``when``: what the query says about time), the sum rescaled
    to [0, 1]; less the question penalty for a memory that asks a question.
    """
    knobs = knobs or RankingKnobs.configured()
    when = when or QueryTime()
    for c in candidates:
        if c.keyword_terms is not None:
            c.keyword = c.keyword_terms.score(knobs.own_line_weight)
    cosines = [
        c.cosine + knobs.feedback_weight * c.feedback
        if c.cosine is not None and c.feedback is not None
        else c.cosine
        for c in candidates
    ]
    dense, semantic_weight = semantic_evidence(cosines, knobs.dense_weight)
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
    asking = {(c.source, c.id) for c in candidates if c.asks_question}
    time_boost = knobs.time_boost if when.asks_when else 0.0
    period_boost = knobs.period_boost if when.periods else 0.0
    scale = 1 + knobs.neighbour_boost + knobs.answer_boost + time_boost + period_boost
    for c in candidates:
        answer_share = knobs.answer_boost if (c.source, c.previous_id) in asking else 0.0
        around = [
            share * fused.get((c.source, neighbour), 0.0)
            for neighbour, share in (
                (c.previous_id, knobs.neighbour_boost + answer_share),
                (c.next_id, knobs.neighbour_boost),
            )
            if neighbour is not None
        ]
        evidence = fused[(c.source, c.id)] + max(around, default=0.0)
        if time_boost and c.mentions_time:
            evidence += time_boost
        if period_boost and when.in_period(c.moment):
            evidence += period_boost
        # Its neighbours were lifted by its fused evidence above; only its own rank pays.
        penalty = knobs.question_penalty if c.asks_question else 0.0
        c.relevance = max(evidence / scale - penalty, 0.0)


Feedback = Callable[[list[int], list[int]], dict[int, float]]
"""(the first ranking's best memory ids, candidate memory ids) -> mean cosine to the best."""


def fuse_with_feedback(
    candidates: list[Candidate],
    knobs: RankingKnobs,
    when: QueryTime,
    feedback: Feedback | None,
) -> None:
    """``fuse``, and with ``knobs.feedback_weight`` and a ``feedback`` source a second time
    after each agent memory got its mean cosine to the first ranking's best memories."""
    fuse(candidates, knobs, when)
    memories = [c for c in candidates if c.source == AGENT_MEMORY]
    if not knobs.feedback_weight or feedback is None or not memories:
        return
    best = sorted(memories, key=lambda c: (-c.relevance, c.id))[: knobs.feedback_docs]
    similar = feedback([c.id for c in best], [c.id for c in memories])
    for c in memories:
        c.feedback = similar.get(c.id)
    fuse(candidates, knobs, when)


def recency(moment: datetime, now: datetime, half_life_days: float | None = None) -> float:
    """1 now, halving every ``SEARCH_RECENCY_HALF_LIFE_DAYS``."""
    half_life = settings.SEARCH_RECENCY_HALF_LIFE_DAYS if half_life_days is None else half_life_days
    age_days = max((now - moment).total_seconds(), 0.0) / 86400
    return float(0.5 ** (age_days / half_life))


def ranked(
    candidates: list[Candidate],
    *,
    weights: SearchWeights,
    threshold: float,
    now: datetime,
    knobs: RankingKnobs | None = None,
    limit: int | None = None,
) -> list[SearchHit]:
    """The candidates above the threshold as hits, best first, one per content hash; the
    first ``limit`` of them (all by default).

    With the relevance gate (``knobs.relevance_gate``) recency, importance
    and source priority are multiplied by the candidate's relevance: they order results that
    are about the query, and a result that is barely about it cannot outrank a relevant one on
    being new or important alone (issue 22, "no filler results").

    Scores are compared as computed; the hits (rounded terms, explanations) are built for the
    ones returned only (building them for a few hundred candidates cost 10-30 ms).
    """
    gated = (knobs or RankingKnobs.configured()).relevance_gate
    half_life = settings.SEARCH_RECENCY_HALF_LIFE_DAYS
    kept: dict[str, tuple[float, int, Candidate, float]] = {}
    for c in candidates:
        # Weak on both kinds of evidence: neither close in meaning nor sharing a word.
        if not (c.keyword > 0 and c.own_match) and (c.cosine is None or c.cosine < threshold):
            continue
        fresh = recency(c.moment, now, half_life)
        others = (
            weights.recency * fresh
            + weights.importance * c.importance
            + weights.source_priority * SOURCE_PRIORITY[c.source]
        )
        score = weights.similarity * c.relevance + (c.relevance if gated else 1.0) * others
        rank = -SOURCES.index(c.source)
        best = kept.get(c.content_hash)
        if best is None or (score, rank) > (best[0], best[1]):
            kept[c.content_hash] = (score, rank, c, fresh)
    order = sorted(kept.values(), key=lambda entry: (-entry[0], -entry[1], entry[2].id))
    return [_hit(c, fresh, weights=weights, gated=gated) for _, _, c, fresh in order[:limit]]


def _hit(c: Candidate, fresh: float, *, weights: SearchWeights, gated: bool) -> SearchHit:
    """One candidate as a result, its terms and their weighted contributions explained."""
    breakdown = {
        "similarity": round(c.relevance, 4),
        "recency": round(fresh, 4),
        "importance": round(c.importance, 4),
        "source_priority": SOURCE_PRIORITY[c.source],
    }
    contributions = {
        term: round(
            getattr(weights, term)
            * value
            * (c.relevance if gated and term != "similarity" else 1.0),
            4,
        )
        for term, value in breakdown.items()
    }
    return SearchHit(
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
