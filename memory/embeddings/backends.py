"""Text embeddings: a local model by default, or an OpenAI-compatible endpoint.

``EMBEDDING_BACKEND=local`` (the default) runs a small model shipped inside a PyPI package on the
CPU, offline; ``EMBEDDING_BACKEND=openai`` calls ``EMBEDDING_URL``/embeddings. Every failure is
raised as ``EmbeddingUnavailable`` so callers can fall back (keyword relevance, a later backfill)
instead of failing the request.

Every vector, a backend's or a client's, passes ``unit_vector`` before it is stored or compared:
scaled to length 1, and refused when it has no direction (all zeros, NaN, infinity). pgvector's
cosine distance to a zero vector is NaN, and one stored zero vector made every later search of
its agent answer 500 (issue 18).
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Protocol

import numpy as np
from django.conf import settings

from config.cpu_priority import background_priority_take
from config.http import ExternalServiceError, post_json
from config.metrics import embedder_timed
from memory.embeddings.local_embedder import DIMENSIONS as LOCAL_DIMENSIONS


class EmbeddingUnavailable(RuntimeError):
    """The embedder cannot answer now; the caller should degrade, not fail."""


class Embedder(Protocol):
    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def unit_vector(values: Sequence[float]) -> list[float] | None:
    """``values`` scaled to length 1, or None when they have no direction: all zeros, or a NaN or
    infinity among them.

    Cosine distance is blind to length, so the scaling changes no ranking; it spares pgvector,
    which computes in float32, a vector whose squares underflow to zero or overflow (a NaN
    distance either way). Scaled by the largest component first, so ``math.hypot`` never
    overflows.
    """
    if not values or not all(math.isfinite(value) for value in values):
        return None
    peak = max(abs(value) for value in values)
    if peak == 0:
        return None
    scaled = [value / peak for value in values]
    norm = math.hypot(*scaled)
    return [value / norm for value in scaled]


def embedding_problem(embedding: Sequence[float]) -> tuple[str, str] | None:
    """Why a vector given by a client cannot be used (code, message), or None."""
    if len(embedding) != LOCAL_DIMENSIONS:
        return (
            "invalid_embedding",
            f"An embedding must have {LOCAL_DIMENSIONS} dimensions, not {len(embedding)}.",
        )
    if not all(math.isfinite(value) for value in embedding):
        return "invalid_embedding", "An embedding must not contain NaN or infinity."
    if unit_vector(embedding) is None:
        return (
            "invalid_embedding",
            "An embedding must not be all zeros: a vector without a direction cannot be compared.",
        )
    return None


class OpenAICompatibleEmbedder:
    """Any server speaking OpenAI's ``POST /embeddings`` (OpenAI, vLLM, Ollama, LiteLLM...)."""

    def __init__(
        self, *, url: str, model: str, api_key: str, dimensions: int, timeout: float
    ) -> None:
        self.url = url.rstrip("/") + "/embeddings"
        self.model = model
        self.api_key = api_key
        self.dimensions = dimensions
        self.timeout = timeout
        self.name = f"openai:{model}:{dimensions}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        body = {"model": self.model, "input": list(texts), "dimensions": self.dimensions}
        try:
            answer = post_json(self.url, body, api_key=self.api_key, timeout=self.timeout)
            rows = sorted(answer["data"], key=lambda row: row["index"])
            vectors = [[float(value) for value in row["embedding"]] for row in rows]
        except ExternalServiceError as exc:
            raise EmbeddingUnavailable(str(exc)) from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbeddingUnavailable(f"{self.url} answered an unexpected shape: {exc}") from exc
        if len(vectors) != len(texts) or any(len(v) != self.dimensions for v in vectors):
            raise EmbeddingUnavailable(
                f"{self.url} returned {len(vectors)} vectors for {len(texts)} texts, "
                f"expected dimension {self.dimensions}"
            )
        return vectors


_lock = threading.Lock()


@lru_cache(maxsize=1)
def _configured_embedder() -> Embedder:
    if settings.EMBEDDING_BACKEND == "openai":
        if not settings.EMBEDDING_URL:
            raise EmbeddingUnavailable("EMBEDDING_BACKEND=openai needs EMBEDDING_URL")
        return OpenAICompatibleEmbedder(
            url=settings.EMBEDDING_URL,
            model=settings.EMBEDDING_MODEL or "text-embedding-3-small",
            api_key=settings.EMBEDDING_API_KEY,
            dimensions=settings.EMBEDDING_DIMENSIONS,
            timeout=settings.EMBEDDING_TIMEOUT_SECONDS,
        )
    if settings.EMBEDDING_BACKEND == "local":
        from memory.embeddings.local_embedder import LocalEmbedder

        return LocalEmbedder()
    raise EmbeddingUnavailable(f"Unknown EMBEDDING_BACKEND {settings.EMBEDDING_BACKEND!r}")


def embedder() -> Embedder:
    with _lock:  # the first call loads a model; concurrent first calls must not load it twice
        return _configured_embedder()


def embedder_reset() -> None:
    """Forget the configured embedder and its vectors (tests switch settings between
    backends)."""
    _configured_embedder.cache_clear()
    _vector_cache.clear()


def embedder_name() -> str:
    return embedder().name


class VectorCache:
    """The last ``EMBEDDING_CACHE_TEXTS`` texts' unit vectors, per process, least recently used
    out first. A model gives a text the same vector every time, so a hit is exactly what the
    embedder would answer; float64 arrays give back the very floats that were put in, at a
    fifth of the memory of Python lists."""

    def __init__(self) -> None:
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str) -> list[float] | None:
        if settings.EMBEDDING_CACHE_TEXTS <= 0:
            return None
        with self._lock:
            vector = self._vectors.get(text)
            if vector is None:
                return None
            self._vectors.move_to_end(text)
        return vector.tolist()  # type: ignore[no-any-return]

    def put(self, text: str, vector: list[float]) -> None:
        size = settings.EMBEDDING_CACHE_TEXTS
        if size <= 0:
            return
        with self._lock:
            self._vectors[text] = np.asarray(vector, dtype=np.float64)
            self._vectors.move_to_end(text)
            while len(self._vectors) > size:
                self._vectors.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()


_vector_cache = VectorCache()


def embed_texts(texts: Sequence[str]) -> list[list[float]]:
    """Unit vectors for the texts, from whichever backend is configured; texts embedded lately
    by this process come from its ``VectorCache`` without calling the backend.

    A vector without a direction (zeros, NaN, infinity: a broken endpoint, a model gone wrong)
    fails the call like an outage, so callers fall back exactly as they do when the embedder is
    down, and no such vector is ever stored.
    """
    found: dict[str, list[float]] = {}
    for text in texts:
        if text not in found and (vector := _vector_cache.get(text)) is not None:
            found[text] = vector
    missing = list(dict.fromkeys(text for text in texts if text not in found))
    if missing:
        for text, vector in zip(missing, _embedded(missing), strict=True):
            _vector_cache.put(text, vector)
            found[text] = vector
    # A text asked for twice gets two lists: callers may change what they are given.
    answered: set[str] = set()
    vectors = []
    for text in texts:
        vectors.append(list(found[text]) if text in answered else found[text])
        answered.add(text)
    return vectors


# Calls of up to this many texts run on the caller's thread: one request's own few, like a
# store's text and then its content with its CONSOLIDATION_NEIGHBOURS (5) neighbours'. Sent to
# the niced lane, that second call waited behind every busy thread of a loaded machine
# (bench/load.py, 6 clients: consolidation p95 297 ms of the store's 384 ms).
CALLER_THREAD_MAX_TEXTS = 8


class BulkLane:
    """One thread per process, at ``EMBEDDING_BULK_NICENESS`` and the idle scheduling policy
    (config.cpu_priority), that runs the calls of more than ``CALLER_THREAD_MAX_TEXTS`` texts.
    On Linux a thread has its own priority, so the kernel gives the cores to the request threads
    first: a search's query embedding and SQL no longer queue behind a batch store's texts in
    the same process (onnxruntime and the tokenizer release the GIL while they compute). Bulk
    calls of one process run one at a time, leaving the other core to searches.
    """

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        # What the thread was made for: a forked child (gunicorn, Celery's pool) inherits the
        # executor but not its thread, and a setting may change (tests).
        self._made_for: tuple[int, int, bool] = (0, 0, False)
        self._lock = threading.Lock()

    def run(self, work: Callable[[], list[list[float]]]) -> list[list[float]]:
        niceness = settings.EMBEDDING_BULK_NICENESS
        if niceness <= 0 or not hasattr(os, "setpriority"):
            return work()
        made_for = (os.getpid(), niceness, settings.BACKGROUND_IDLE_POLICY)
        with self._lock:
            if self._executor is None or self._made_for != made_for:
                if self._executor is not None and self._made_for[0] == os.getpid():
                    self._executor.shutdown(wait=False)
                self._executor = ThreadPoolExecutor(
                    max_workers=1,
                    thread_name_prefix="bulk-embedding",
                    initializer=background_priority_take,
                    initargs=(niceness,),
                )
                self._made_for = made_for
            executor = self._executor
        return executor.submit(work).result()


_bulk_lane = BulkLane()


def _embedded(texts: list[str]) -> list[list[float]]:
    try:
        with embedder_timed(settings.EMBEDDING_BACKEND):
            model = embedder()
            if len(texts) > CALLER_THREAD_MAX_TEXTS:
                vectors = _bulk_lane.run(lambda: model.embed(texts))
            else:
                vectors = model.embed(texts)
    except EmbeddingUnavailable:
        raise
    except Exception as exc:  # a model runtime error must degrade like an outage
        raise EmbeddingUnavailable(f"{type(exc).__name__}: {exc}") from exc
    units = [unit_vector(vector) for vector in vectors]
    usable = [unit for unit in units if unit is not None]
    if len(usable) != len(units):
        raise EmbeddingUnavailable(
            f"{embedder_name()} answered {len(units) - len(usable)} vector(s) without a "
            "direction (all zeros, NaN or infinity)"
        )
    return usable


def embed_query(text: str) -> list[float]:
    return embed_texts([text])[0]
