from __future__ import annotations

import pytest

from memory.embeddings.backends import embedder_reset
from tests.standins import openai_standin


@pytest.fixture
def embedding_standin(settings):
    """Point the embedder at a local OpenAI-compatible stand-in for the test's duration."""
    with openai_standin(dimensions=16) as standin:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_URL = standin.url
        settings.EMBEDDING_MODEL = "standin-embed"
        settings.EMBEDDING_DIMENSIONS = 16
        settings.EMBEDDING_API_KEY = "test-key"
        embedder_reset()
        yield standin
    embedder_reset()


@pytest.fixture
def no_embedder(settings):
    """An embedder that is configured but unreachable, as during an outage."""
    settings.EMBEDDING_BACKEND = "openai"
    settings.EMBEDDING_URL = "http://127.0.0.1:9/v1"  # discard port: nothing listens
    settings.EMBEDDING_TIMEOUT_SECONDS = 0.5
    embedder_reset()
    yield
    embedder_reset()
