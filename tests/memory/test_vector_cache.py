"""The per-process cache of unit vectors in front of the embedder (memory.embeddings.backends)."""

from __future__ import annotations

import pytest

from memory.embeddings.backends import embed_texts, embedder_reset


def embedded_inputs(standin) -> list[str]:
    return [text for request in standin.requests for text in request["body"]["input"]]


def test_a_text_embedded_again_does_not_reach_the_backend(embedding_standin):
    first = embed_texts(["invoices in EUR", "the deploy window"])
    again = embed_texts(["the deploy window", "a new text", "invoices in EUR"])

    assert embedded_inputs(embedding_standin) == [
        "invoices in EUR",
        "the deploy window",
        "a new text",
    ]
    assert again[0] == first[1]
    assert again[2] == first[0]


def test_a_cached_vector_is_the_backends_answer_to_the_last_bit(embedding_standin, settings):
    cached = embed_texts(["the same text"])[0]
    settings.EMBEDDING_CACHE_TEXTS = 0
    fresh = embed_texts(["the same text"])[0]

    assert fresh == cached
    assert embedded_inputs(embedding_standin) == ["the same text", "the same text"]


def test_the_least_recently_used_text_leaves_first(embedding_standin, settings):
    settings.EMBEDDING_CACHE_TEXTS = 2
    embed_texts(["a", "b"])
    embed_texts(["a"])  # "a" is now the most recent, so "c" pushes "b" out
    embed_texts(["c"])
    embed_texts(["a", "b"])

    assert embedded_inputs(embedding_standin) == ["a", "b", "c", "b"]


def test_each_caller_gets_its_own_list(embedding_standin):
    first, twin = embed_texts(["repeated", "repeated"])
    first[0] = 99.0

    assert twin[0] != 99.0
    assert embed_texts(["repeated"])[0][0] != 99.0
    assert embedded_inputs(embedding_standin) == ["repeated"]


def test_switching_the_embedder_forgets_the_vectors(embedding_standin):
    embed_texts(["kept until the switch"])
    embedder_reset()
    embed_texts(["kept until the switch"])

    assert embedded_inputs(embedding_standin) == ["kept until the switch"] * 2


@pytest.mark.parametrize("size", [0, -1])
def test_a_size_of_zero_or_less_turns_the_cache_off(embedding_standin, settings, size):
    settings.EMBEDDING_CACHE_TEXTS = size
    embed_texts(["x"])
    embed_texts(["x"])

    assert embedded_inputs(embedding_standin) == ["x", "x"]
