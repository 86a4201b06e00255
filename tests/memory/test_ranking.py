"""The one ranking module: its normalisation rule holds for every source that fuses evidence."""

from __future__ import annotations

import pytest

from memory.knowledge import selectors as knowledge_selectors
from memory.search import ranking


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
