from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from memory.embeddings.backends import embedder_reset


@pytest.fixture
def embedder_down(settings: Any) -> Iterator[None]:
    settings.EMBEDDING_BACKEND = "openai"
    settings.EMBEDDING_URL = "http://127.0.0.1:9/v1"  # discard port: nothing listens
    settings.EMBEDDING_TIMEOUT_SECONDS = 0.5
    embedder_reset()
    yield
    embedder_reset()


@pytest.fixture
def clock() -> datetime:
    """A fixed 'now' the services are given, so deadlines and windows are exact."""
    return datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
