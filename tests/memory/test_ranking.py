"""The one ranking module: its normalisation rule holds for every source that fuses evidence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory.knowledge import selectors as knowledge_selectors
from memory.search import ranking
from memory.search.temporal import Period, QueryTime


def test_scores_that_differ_only_by_float_noise_are_equal_evidence():
    assert ranking.minmax([0.3, 0.3 + 1e-12, 0.3]) == [1.0, 1.0, 1.0]


def test_equal_scores_of_zero_are_no_evidence():
    assert ranking.minmax([0.0, 0.0]) == [0.0, 0.0]


def test_distinct_scores_span_zero_to_one():
    assert ranking.minmax([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]


@pytest.mark.parametrize(
    ("cosines", "dense", "weight"),
    [
        ([0.9, None, 0.5], [1.0, 0.0, 0.0], 0.5),
        ([None, None], [0.0, 0.0], 0.0),
    ],
)
def test_a_candidate_without_a_vector_counts_as_the_lowest_cosine(cosines, dense, weight):
    assert ranking.semantic_evidence(cosines, 0.5) == (dense, weight)


def test_knowledge_search_ranks_with_the_same_functions_as_memory_search():
    assert vars(knowledge_selectors)["minmax"] is ranking.minmax
    assert vars(knowledge_selectors)["semantic_evidence"] is ranking.semantic_evidence
    assert vars(knowledge_selectors)["hybrid"] is ranking.hybrid


NOW = datetime(2026, 11, 26, tzinfo=UTC)


def candidate(
    id_,
    *,
    cosine,
    keyword,
    age_days=0,
    importance=0.5,
    mentions_time=False,
    source=None,
    asks_question=False,
    previous_id=None,
    next_id=None,
):
    return ranking.Candidate(
        source=source or ranking.AGENT_MEMORY,
        id=id_,
        content="",
        cosine=cosine,
        keyword=keyword,
        moment=NOW - timedelta(days=age_days),
        importance=importance,
        content_hash=str(id_),
        details={},
        mentions_time=mentions_time,
        asks_question=asks_question,
        previous_id=previous_id,
        next_id=next_id,
    )


def filler_case():
    """The vendor-contract query (issue 22): the relevant workflow step shares its words but
    is three months old; the filler memory shares none, sits a little over the threshold, is new
    and important; two old memories share a common word."""
    relevant = candidate(1, cosine=0.45, keyword=2.0, age_days=90, source=ranking.WORKFLOW_STEPS)
    filler = candidate(3, cosine=0.30, keyword=0.0, age_days=0, importance=0.9)
    weak = [candidate(i, cosine=0.1, keyword=0.5, age_days=300) for i in (4, 5)]
    return [relevant, filler, *weak]


@pytest.mark.parametrize(("gate", "first"), [(False, 3), (True, 1)])
def test_relevance_gates_recency_and_importance(gate, first):
    candidates = filler_case()
    knobs = ranking.RankingKnobs(relevance_gate=gate)
    ranking.fuse(candidates, knobs, QueryTime())
    hits = ranking.ranked(
        candidates, weights=ranking.SearchWeights(), threshold=0.2, now=NOW, knobs=knobs
    )
    assert hits[0].id == first
    filler = next(hit for hit in hits if hit.id == 3)
    # Gated, what the filler gets for being new and important is scaled by its relevance.
    expected = 0.2 * 1.0 * (filler.breakdown["similarity"] if gate else 1.0)
    assert filler.contributions["recency"] == pytest.approx(expected, abs=1e-4)


def test_with_relevance_only_weights_the_gate_changes_nothing():
    orders = []
    for gate in (False, True):
        candidates = filler_case()
        knobs = ranking.RankingKnobs(relevance_gate=gate)
        ranking.fuse(candidates, knobs, QueryTime())
        hits = ranking.ranked(
            candidates,
            weights=ranking.SearchWeights(1.0, 0.0, 0.0, 0.0),
            threshold=0.2,
            now=NOW,
            knobs=knobs,
        )
        orders.append([(hit.id, hit.score) for hit in hits])
    assert orders[0] == orders[1]


def test_a_question_asking_when_lifts_the_memory_that_names_a_time():
    plain = candidate(1, cosine=0.60, keyword=2.0)
    dated = candidate(2, cosine=0.58, keyword=2.0, mentions_time=True)
    unrelated = candidate(3, cosine=0.10, keyword=0.0)
    knobs = ranking.RankingKnobs(time_boost=0.2)
    ranking.fuse([plain, dated, unrelated], knobs, QueryTime(asks_when=True))
    assert dated.relevance > plain.relevance
    ranking.fuse([plain, dated, unrelated], knobs, QueryTime(asks_when=False))
    assert dated.relevance < plain.relevance


def test_a_question_ranks_below_its_answer_and_still_lifts_it():
    # "What pet do you have?" matches the query best; "A pup and a kitty." is its answer.
    def session():
        return [
            candidate(1, cosine=0.60, keyword=1.6, asks_question=True, next_id=2),
            candidate(2, cosine=0.55, keyword=1.4, previous_id=1),
            candidate(3, cosine=0.52, keyword=1.3),
            candidate(4, cosine=0.10, keyword=0.0),
        ]

    plain = session()
    ranking.fuse(plain, ranking.RankingKnobs(question_penalty=0.0), QueryTime())
    penalised = session()
    ranking.fuse(penalised, ranking.RankingKnobs(question_penalty=0.12), QueryTime())
    question, answer, other, _unrelated = penalised
    assert question.relevance == pytest.approx(plain[0].relevance - 0.12)
    # The answer keeps the lift its question's whole evidence gives it, so it outranks both.
    assert answer.relevance == pytest.approx(plain[1].relevance)
    assert answer.relevance > question.relevance
    assert answer.relevance > other.relevance
    # Never below 0: a relevance stays a share.
    ranking.fuse(penalised, ranking.RankingKnobs(question_penalty=1.0), QueryTime())
    assert question.relevance == 0.0


def test_the_turn_after_a_question_takes_a_larger_share_of_its_evidence():
    question = candidate(1, cosine=0.60, keyword=1.6, asks_question=True, next_id=2)
    answer = candidate(2, cosine=0.40, keyword=0.8, previous_id=1)
    statement = candidate(3, cosine=0.60, keyword=1.6, next_id=4)
    reply = candidate(4, cosine=0.40, keyword=0.8, previous_id=3)
    low = candidate(5, cosine=0.10, keyword=0.0)
    ranking.fuse(
        [question, answer, statement, reply, low],
        ranking.RankingKnobs(neighbour_boost=0.3, answer_boost=0.1),
        QueryTime(),
    )
    # Same evidence, same neighbour's evidence: only the question's answer gets the extra share.
    assert answer.relevance > reply.relevance
    # Fused 0.5 x 0.6 (cosine) + 0.5 x 0.5 (keyword) = 0.55, each neighbour fused 1.0.
    assert reply.relevance == pytest.approx((0.55 + 0.3 * 1.0) / 1.4)
    assert answer.relevance == pytest.approx((0.55 + 0.4 * 1.0) / 1.4)


def test_bm25_at_own_line_weight_one_is_plain_bm25_over_the_window():
    terms = ranking.KeywordTerms(idfs=(2.0, 0.5), own=(1, 0), window=(2, 3), length_ratio=1.5)
    saturation = ranking.BM25_K1 * (1 - ranking.BM25_B + ranking.BM25_B * 1.5)
    plain = sum(
        idf * tf * (ranking.BM25_K1 + 1) / (tf + saturation) for idf, tf in ((2.0, 2), (0.5, 3))
    )
    assert terms.score(1.0) == pytest.approx(plain)
    # An own occurrence counts three times at weight 3: 2 + 2 x 1 for the first lexeme.
    first = 2.0 * 4 * (ranking.BM25_K1 + 1) / (4 + saturation)
    third = 0.5 * 3 * (ranking.BM25_K1 + 1) / (3 + saturation)
    assert terms.score(3.0) == pytest.approx(first + third)
    assert ranking.KeywordTerms(idfs=(), own=(), window=(), length_ratio=1.0).score(3.0) == 0.0


def test_the_turn_that_says_the_words_outranks_the_neighbours_that_share_its_window():
    # One window of three turns: each document holds the query word once, only the middle
    # turn's own line says it; their cosines favour the first turn a little.
    def window():
        return [
            candidate(1, cosine=0.52, keyword=0.0, next_id=2),
            candidate(2, cosine=0.50, keyword=0.0, previous_id=1, next_id=3),
            candidate(3, cosine=0.50, keyword=0.0, previous_id=2),
            candidate(4, cosine=0.10, keyword=0.0),
        ]

    def ranked(own_line_weight):
        candidates = window()
        for c, own in zip(candidates, (0, 1, 0, 0), strict=True):
            in_window = 1 if c.id != 4 else 0
            c.keyword_terms = ranking.KeywordTerms((1.0,), (own,), (in_window,), 1.0)
        ranking.fuse(candidates, ranking.RankingKnobs(own_line_weight=own_line_weight))
        # The keyword score shown with a hit is the one that ranked it.
        assert candidates[1].keyword == candidates[1].keyword_terms.score(own_line_weight)
        return [c.id for c in sorted(candidates, key=lambda c: -c.relevance)]

    assert ranked(1.0)[0] == 1
    assert ranked(3.0)[0] == 2


def test_a_named_period_lifts_the_memories_that_occurred_in_it():
    inside = candidate(1, cosine=0.50, keyword=1.0, age_days=10)
    outside = candidate(2, cosine=0.52, keyword=1.0, age_days=100)
    unrelated = candidate(3, cosine=0.10, keyword=0.0)
    when = QueryTime(periods=(Period(NOW - timedelta(days=30), NOW),))
    ranking.fuse([inside, outside, unrelated], ranking.RankingKnobs(period_boost=0.2), when)
    assert inside.relevance > outside.relevance
    assert 0.0 <= outside.relevance <= inside.relevance <= 1.0


def test_feedback_lifts_what_resembles_the_first_rankings_best():
    best = candidate(1, cosine=0.70, keyword=2.0)
    alike = candidate(2, cosine=0.40, keyword=0.0)
    unlike = candidate(3, cosine=0.45, keyword=0.0)
    low = candidate(4, cosine=0.10, keyword=0.0)
    pool = [best, alike, unlike, low]
    asked = []

    def feedback(top, ids):
        asked.append((top, sorted(ids)))
        return {1: 1.0, 2: 0.9, 3: 0.1, 4: 0.0}

    ranking.fuse_with_feedback(pool, ranking.RankingKnobs(), QueryTime(), feedback)
    # Off by default: nothing asked, nothing moved.
    assert unlike.relevance > alike.relevance
    assert asked == []
    knobs = ranking.RankingKnobs(feedback_weight=1.0, feedback_docs=1)
    ranking.fuse_with_feedback(pool, knobs, QueryTime(), feedback)
    assert asked == [([1], [1, 2, 3, 4])]
    assert alike.relevance > unlike.relevance
