"""Properties of the SPEC 8 formulas (trust/scoring.py) over any history hypothesis can invent."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trust.scores.scoring import (
    MAX_DEPTH,
    MAX_NOVELTY,
    PRIOR,
    TrustEvidence,
    citation_entropy,
    dissent_depth,
    trust_score,
)

counts = st.integers(min_value=0, max_value=10_000)
prior_strengths = st.floats(min_value=0, max_value=1_000, allow_nan=False)


@st.composite
def evidence(draw: st.DrawFn) -> TrustEvidence:
    known = draw(counts)
    depth_count = draw(counts)
    overrides = draw(counts)
    return TrustEvidence(
        dissents_known=known,
        dissents_impactful=draw(st.integers(min_value=0, max_value=known)),
        depth_count=depth_count,
        depth_sum=draw(st.floats(min_value=0, max_value=MAX_DEPTH * depth_count)),
        overrides=overrides,
        overrides_regretted=draw(st.integers(min_value=0, max_value=overrides)),
    )


@given(evidence(), prior_strengths)
def test_the_score_stays_between_0_and_1(history, m):
    breakdown = trust_score(history, prior_strength=m)

    assert 0.0 <= breakdown.score <= 1.0
    assert 0.0 <= breakdown.raw <= 1.0


@given(prior_strengths)
def test_a_new_agent_scores_the_prior(m):
    assert trust_score(TrustEvidence(), prior_strength=m).score == PRIOR


@given(evidence())
def test_prior_strength_0_is_the_raw_formula(history):
    impact = (
        history.dissents_impactful / history.dissents_known if history.dissents_known else PRIOR
    )
    depth = history.depth_sum / history.depth_count / 2 if history.depth_count else PRIOR
    kept = 1 - history.overrides_regretted / history.overrides if history.overrides else PRIOR

    score = trust_score(history, prior_strength=0).score

    assert math.isclose(score, 0.4 * impact + 0.3 * depth + 0.3 * kept, abs_tol=1e-6)


@given(evidence(), prior_strengths)
def test_the_blend_lies_between_the_prior_and_the_raw_score(history, m):
    breakdown = trust_score(history, prior_strength=m)

    low, high = sorted((PRIOR, breakdown.raw))
    assert low - 1e-6 <= breakdown.score <= high + 1e-6


@given(
    st.text(max_size=2_000),
    st.integers(min_value=0, max_value=1_000),
    st.none() | st.floats(min_value=-1.0, max_value=1.0),
)
def test_depth_stays_between_0_and_2_and_novelty_is_1_minus_the_similarity(
    text, citations, similarity
):
    depth = dissent_depth(text=text, citations=citations, max_similarity=similarity)

    assert 0.0 <= depth.depth <= MAX_DEPTH
    assert depth.novelty == (0.0 if similarity is None else 1.0 - similarity)
    assert 0.0 <= depth.novelty <= MAX_NOVELTY


def test_a_negative_cosine_is_more_novel_than_an_unrelated_text():
    # The design note's novelty, 1 - max cosine, is not clamped: only the total is, at 2.0.
    opposed = dissent_depth(text="no", citations=0, max_similarity=-0.5)
    unrelated = dissent_depth(text="no", citations=0, max_similarity=0.0)

    assert (opposed.novelty, unrelated.novelty) == (1.5, 1.0)
    assert opposed.depth == pytest.approx(1 / 50 + 1.5)


def test_only_the_depth_total_is_capped_at_2():
    depth = dissent_depth(text="word " * 50, citations=3, max_similarity=-1.0)

    assert (depth.length, depth.citations, depth.novelty) == (1.0, 0.5, 2.0)
    assert depth.depth == MAX_DEPTH


def test_a_similarity_past_a_cosines_range_by_rounding_is_held_to_it():
    assert dissent_depth(text="x", citations=0, max_similarity=1.0000001).novelty == 0.0
    assert dissent_depth(text="x", citations=0, max_similarity=-1.0000001).novelty == MAX_NOVELTY


@given(st.lists(st.lists(st.text(min_size=1, max_size=20), max_size=5), max_size=50))
def test_entropy_is_never_negative_nor_above_log2_of_the_criteria(citations):
    entropy, named = citation_entropy(citations)

    assert entropy >= 0.0
    assert entropy <= math.log2(max(len(named), 1)) + 1e-9
    assert sum(named.values()) == sum(len(cited) for cited in citations)
