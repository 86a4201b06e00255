from __future__ import annotations

import math

import pytest

from memory.embeddings.backends import embed_texts, embedder, embedder_reset
from memory.embeddings.local_embedder import DIMENSIONS, MODEL_NAME, SHIPPED_MODEL, LocalEmbedder


@pytest.fixture(scope="module", params=[MODEL_NAME, SHIPPED_MODEL])
def model(request):
    return LocalEmbedder(model=request.param)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_it_loads_from_installed_packages_without_a_model_hub(model, monkeypatch):
    # Offline flags would make any hub download fail; the model must not need one.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")

    vectors = model.embed(["hello world"])

    assert len(vectors[0]) == DIMENSIONS
    assert math.isclose(math.sqrt(sum(v * v for v in vectors[0])), 1.0, rel_tol=1e-4)


def test_related_texts_are_closer_than_unrelated_ones(model):
    key, question, revenue = model.embed(
        [
            "The butler hid the key under a stone in the garden.",
            "Where did someone hide the key?",
            "Quarterly revenue grew five percent on strong cloud sales.",
        ]
    )

    assert cosine(key, question) > cosine(key, revenue) + 0.2


def test_a_batch_gives_the_same_vectors_as_one_at_a_time(model):
    texts = ["a short one", "a considerably longer sentence that needs padding in a batch"]

    batched = model.embed(texts)
    single = [model.embed([text])[0] for text in texts]

    for got, expected in zip(batched, single, strict=True):
        assert cosine(got, expected) > 0.9999


def test_it_is_the_default_backend(settings):
    settings.EMBEDDING_BACKEND = "local"
    embedder_reset()
    try:
        assert embedder().name == "local:all-MiniLM-L6-v2-int8-dynamic"
        assert len(embed_texts(["x"])[0]) == DIMENSIONS
    finally:
        embedder_reset()
