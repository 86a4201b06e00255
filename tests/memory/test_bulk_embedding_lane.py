"""Calls of more than ``CALLER_THREAD_MAX_TEXTS`` texts are embedded on a thread of lower CPU
priority (``EMBEDDING_BULK_NICENESS``, and the idle scheduling policy with
``BACKGROUND_IDLE_POLICY``); a query's one text, or one store's few, on the caller's thread."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import pytest

from memory.embeddings import backends
from memory.embeddings.backends import CALLER_THREAD_MAX_TEXTS, EmbeddingUnavailable, embed_texts


class ThreadRecordingEmbedder:
    """Answers a fixed unit vector and notes the thread, niceness and scheduling policy each call
    ran at."""

    name = "test:thread-recording"
    dimensions = 3

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[int, int, int, int]] = []  # (thread, niceness, policy, texts)
        self.fail = fail

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        thread = threading.get_native_id()
        self.calls.append(
            (thread, os.getpriority(os.PRIO_PROCESS, thread), os.sched_getscheduler(0), len(texts))
        )
        if self.fail:
            raise RuntimeError("the model broke")
        return [[1.0, 0.0, 0.0] for _ in texts]


@pytest.fixture
def recording(monkeypatch, settings) -> ThreadRecordingEmbedder:
    settings.EMBEDDING_CACHE_TEXTS = 0
    spy = ThreadRecordingEmbedder()
    monkeypatch.setattr(backends, "embedder", lambda: spy)
    return spy


def memories(count: int) -> list[str]:
    return [f"memory {n}" for n in range(count)]


@pytest.mark.parametrize(
    ("idle_policy", "bulk_policy"), [(True, os.SCHED_IDLE), (False, os.SCHED_OTHER)]
)
def test_a_batch_is_embedded_on_a_niced_thread_and_a_request_s_few_on_its_own(
    recording, settings, idle_policy, bulk_policy
):
    settings.EMBEDDING_BULK_NICENESS = 10
    settings.BACKGROUND_IDLE_POLICY = idle_policy
    caller = threading.get_native_id()
    own = (os.getpriority(os.PRIO_PROCESS, caller), os.sched_getscheduler(0))

    embed_texts(["one query"])
    embed_texts(memories(CALLER_THREAD_MAX_TEXTS))  # a store's content and its neighbours'
    embed_texts(memories(CALLER_THREAD_MAX_TEXTS + 1))

    query, few, (bulk_thread, bulk_niceness, policy, texts) = recording.calls
    assert query[:3] == few[:3] == (caller, *own)
    assert bulk_thread != caller
    assert bulk_niceness == max(10, own[0])
    assert policy == bulk_policy
    assert texts == CALLER_THREAD_MAX_TEXTS + 1
    # The caller keeps its priority.
    assert (os.getpriority(os.PRIO_PROCESS, caller), os.sched_getscheduler(0)) == own


def test_niceness_zero_embeds_everything_on_the_callers_thread(recording, settings):
    settings.EMBEDDING_BULK_NICENESS = 0

    embed_texts(memories(CALLER_THREAD_MAX_TEXTS + 1))

    assert recording.calls[0][0] == threading.get_native_id()


def test_a_failure_on_the_bulk_thread_reaches_the_caller_as_an_outage(monkeypatch, settings):
    settings.EMBEDDING_CACHE_TEXTS = 0
    settings.EMBEDDING_BULK_NICENESS = 10
    spy = ThreadRecordingEmbedder(fail=True)
    monkeypatch.setattr(backends, "embedder", lambda: spy)

    with pytest.raises(EmbeddingUnavailable, match="the model broke"):
        embed_texts(memories(CALLER_THREAD_MAX_TEXTS + 1))


def test_a_system_that_refuses_the_idle_policy_leaves_the_thread_niced(
    recording, settings, monkeypatch, caplog
):
    def refused(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refused)
    settings.EMBEDDING_BULK_NICENESS = 11  # a new thread: the lane's first thread is made for 10
    settings.BACKGROUND_IDLE_POLICY = True

    assert embed_texts(memories(CALLER_THREAD_MAX_TEXTS + 1))

    (_, niceness, policy, _) = recording.calls[0]
    assert niceness == max(11, os.nice(0))
    assert policy == os.SCHED_OTHER
    assert "keeps the normal scheduling policy" in caplog.text
