"""The trust formulas of SPEC 8 as pure functions: depth, trust score, citation entropy.

Nothing here touches the database, so the property tests can drive them with any history.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

PRIOR = 0.6  # a new agent's score, and the value of a term that has no events yet
MAX_DEPTH = 2.0
MAX_NOVELTY = 2.0  # 1 - a cosine of -1
WORDS_FOR_FULL_LENGTH = 50
CITATION_BONUS = 0.2
MAX_CITATION_BONUS = 0.5
IMPACT_WEIGHT, DEPTH_WEIGHT, REGRET_WEIGHT = 0.4, 0.3, 0.3


def normalised_text(text: str) -> str:
    """How outputs are compared: Unicode NFC, runs of whitespace as one space, no ends.

    Case and punctuation count (a changed word is a changed decision); re-wrapping or
    re-indenting the same words is not a change.
    """
    return " ".join(unicodedata.normalize("NFC", text).split())


def text_hash(text: str) -> str:
    return hashlib.sha256(normalised_text(text).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Depth:
    length: float
    citations: float
    novelty: float
    depth: float


def dissent_depth(*, text: str, citations: int, max_similarity: float | None) -> Depth:
    """Depth = min(words/50, 1) + min(0.2·citations, 0.5) + novelty, capped at 2.0.

    ``max_similarity`` is the highest cosine similarity to the agent's previous dissents, None
    when it has none (novelty 0, as the design note has it). Novelty is the design note's
    1 - max cosine, so it runs from 0 (a repeat) to 2 (the opposite of everything the agent
    said before); only the total is capped. The similarity is held to a cosine's range [-1, 1]
    first: computed in floating point it can overshoot 1 by an ulp, which would make a repeat
    a hair less than no novelty.
    """
    length = min(len(text.split()) / WORDS_FOR_FULL_LENGTH, 1.0)
    citation_score = min(CITATION_BONUS * citations, MAX_CITATION_BONUS)
    novelty = 0.0
    if max_similarity is not None:
        novelty = 1.0 - min(max(max_similarity, -1.0), 1.0)
    return Depth(
        length=length,
        citations=citation_score,
        novelty=novelty,
        depth=min(length + citation_score + novelty, MAX_DEPTH),
    )


@dataclass(frozen=True)
class TrustEvidence:
    """What an agent's score is computed from, already narrowed to the windows of SPEC 8."""

    dissents_known: int = 0  # dissents whose impact is known, in the window used
    dissents_impactful: int = 0
    dissents_window: str = "none"  # "90d", "all" or "none"
    depth_count: int = 0  # the last (up to) 100 dissents
    depth_sum: float = 0.0
    overrides: int = 0
    overrides_regretted: int = 0
    overrides_window: str = "none"


@dataclass(frozen=True)
class TrustBreakdown:
    score: float
    raw: float
    impact_ratio: float | None
    avg_depth: float | None
    regret_ratio: float | None
    impact_term: float
    depth_term: float
    regret_term: float
    evidence: int
    prior_strength: float
    dissents_window: str
    overrides_window: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def trust_score(evidence: TrustEvidence, *, prior_strength: float) -> TrustBreakdown:
    """raw = 0.4*impact_ratio + 0.3*(avg_depth / 2) + 0.3*(1 - regret_ratio), blended toward
    the prior: (m*0.6 + n*raw) / (m + n), n = the events counted in the two ratios.

    avg_depth is divided by its cap (2.0) so the score stays in [0, 1]; the design note's
    unnormalised depth would let it reach 1.3. A term without events takes the prior's value.
    """
    impact_ratio = (
        evidence.dissents_impactful / evidence.dissents_known if evidence.dissents_known else None
    )
    avg_depth = evidence.depth_sum / evidence.depth_count if evidence.depth_count else None
    regret_ratio = evidence.overrides_regretted / evidence.overrides if evidence.overrides else None
    impact_term = PRIOR if impact_ratio is None else impact_ratio
    depth_term = PRIOR if avg_depth is None else min(avg_depth, MAX_DEPTH) / MAX_DEPTH
    regret_term = PRIOR if regret_ratio is None else 1.0 - regret_ratio
    raw = IMPACT_WEIGHT * impact_term + DEPTH_WEIGHT * depth_term + REGRET_WEIGHT * regret_term
    evidence_count = evidence.dissents_known + evidence.overrides
    if prior_strength + evidence_count > 0:
        # (m·0.6 + n·raw) / (m + n) as a weighted mean: the product m·0.6 underflows for a
        # subnormal m and the quotient came out 1.0 (found by the property tests).
        prior_weight = prior_strength / (prior_strength + evidence_count)
        score = prior_weight * PRIOR + (1.0 - prior_weight) * raw
    else:
        score = raw
    return TrustBreakdown(
        score=round(min(max(score, 0.0), 1.0), 6),
        raw=round(raw, 6),
        impact_ratio=impact_ratio,
        avg_depth=avg_depth,
        regret_ratio=regret_ratio,
        impact_term=impact_term,
        depth_term=depth_term,
        regret_term=regret_term,
        evidence=evidence_count,
        prior_strength=prior_strength,
        dissents_window=evidence.dissents_window,
        overrides_window=evidence.overrides_window,
    )


def citation_entropy(citations: Iterable[Iterable[str]]) -> tuple[float, dict[str, int]]:
    """Shannon entropy (bits) of the criteria cited over some dissents, and the counts.

    An agent that always cites the same criterion scores 0; one that spreads its citations
    evenly over four criteria scores 2.
    """
    counts = Counter(name for cited in citations for name in cited)
    total = sum(counts.values())
    if total == 0:
        return 0.0, {}
    entropy = -sum((n / total) * math.log2(n / total) for n in counts.values())
    return max(entropy, 0.0), dict(sorted(counts.items()))
