"""Search my memories (SPEC 5): one call over four sources, merged and explained.

Per source, candidates come from a semantic leg (nearest vectors) and a keyword leg (full-text
matches), both index-backed. Each candidate's *similarity* fuses the two kinds of evidence, its
session neighbours' and the time evidence as ``memory.search.ranking.RankingKnobs`` says (knobs
in settings, chosen by leave-one-conversation-out on LoCoMo dev, docs/retrieval-research.md).
Then every candidate is ranked by

    score = 0.5·similarity + similarity·(0.2·recency + 0.2·importance + 0.1·source_priority)

(weights configurable per deployment and per request; the relevance gate, on by default, is the
factor ``similarity`` on the other terms), de-duplicated by content hash, cut by the similarity
threshold and the top K. Each hit carries the terms and their contributions.

The legs of each source are in ``memory.search.legs``, the fusion and the score in
``memory.search.ranking``, how a vector leg scans in ``memory.search.plans``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Sequence
from contextvars import Context, copy_context
from dataclasses import dataclass, replace
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config.metrics import search_observe
from config.routers import lag_tolerant, read_connection
from config.sql import row_named, rows_named
from ledger.models import Agent
from memory.embeddings.backends import EmbeddingUnavailable, embed_query
from memory.episodic.validity import CURRENTLY_VALID, Validity
from memory.search.filters import MemoryFilter
from memory.search.legs import (
    event_candidates,
    knowledge_base_candidates,
    memory_candidates,
    memory_feedback,
)
from memory.search.plans import (
    HNSW_EF_SEARCH,
    hnsw_scan_configure,
    nearest_sql,
    vector_literal,
)
from memory.search.ranking import (
    AGENT_MEMORY,
    AUDIT_LOG,
    KNOWLEDGE_BASE,
    SOURCES,
    WORKFLOW_STEPS,
    Candidate,
    Feedback,
    RankingKnobs,
    SearchHit,
    SearchWeights,
    fuse_with_feedback,
    ranked,
)
from memory.search.temporal import QueryTime, query_time

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchOutcome:
    hits: list[SearchHit]
    semantic: bool
    took_ms: float
    candidates: int


MEMORY_DETAILS_SQL = """
SELECT id, content, role, session_id, memory_type, tags, metadata, occurred_at, created_at,
       importance, updated_at
FROM memory_memory WHERE tenant_id = %(tenant)s AND agent_id = %(agent)s AND id = ANY(%(ids)s)
"""


def memory_hits_completed(agent: Agent, hits: list[SearchHit]) -> list[SearchHit]:
    """The hits with their memories' text and details, read for these few only (ranking needs
    neither; reading them for every candidate cost more than the rest of the ranking). A memory
    deleted in between leaves the list."""
    ids = [hit.id for hit in hits if hit.source == AGENT_MEMORY]
    if not ids:
        return hits
    with read_connection.cursor() as cursor:
        cursor.execute(
            MEMORY_DETAILS_SQL, {"tenant": agent.tenant_id, "agent": agent.pk, "ids": ids}
        )
        rows = {int(row.id): row for row in rows_named(cursor)}
    completed = []
    for hit in hits:
        if hit.source != AGENT_MEMORY:
            completed.append(hit)
        elif (row := rows.get(hit.id)) is not None:
            details = {
                "role": row.role,
                "session_id": row.session_id,
                "memory_type": row.memory_type,
                "tags": list(row.tags),
                # Django leaves jsonb undecoded on raw cursors.
                "metadata": json.loads(row.metadata)
                if isinstance(row.metadata, str)
                else row.metadata,
                "occurred_at": row.occurred_at,
                "created_at": row.created_at,
                "stored_importance": float(row.importance),
                "updated_at": row.updated_at,
            }
            completed.append(replace(hit, content=row.content, details=details))
    return completed


@lag_tolerant()
def memories_search(
    *,
    agent: Agent,
    query: str,
    top_k: int = 5,
    sources: Sequence[str] = SOURCES,
    filters: MemoryFilter | None = None,
    weights: SearchWeights | None = None,
    threshold: float | None = None,
    now: datetime | None = None,
    record_retrieval: bool = True,
    vector: Sequence[float] | None = None,
    validity: Validity = CURRENTLY_VALID,
) -> SearchOutcome:
    """Search the agent's memories, the ledger it may see and the knowledge base (SPEC 5).

    Without an embedder the keyword evidence alone ranks (``semantic`` is false). Returned
    memories get their retrieval statistics updated by a task, after the response, unless
    ``record_retrieval`` is false: a person looking through an agent's memories (the memory
    explorer) is not the agent using them, and must not keep them from decaying. ``vector`` is
    the query's embedding when the caller already has it (from the same model). ``validity``
    says which of the agent's memories by their validity interval (default: those still valid).
    """
    started = time.perf_counter()
    moment = now or timezone.now()
    if vector is None:
        try:
            vector = embed_query(query)
        except EmbeddingUnavailable as exc:
            logger.warning("searching by keywords only: %s", exc)
    when = query_time(query, moment)
    candidates = search_candidates(
        agent=agent,
        query=query,
        vector=vector,
        sources=sources,
        filters=filters or MemoryFilter(),
        now=moment,
        when=when,
        validity=validity,
    )
    hits = hits_ranked(
        candidates,
        weights=weights or SearchWeights.configured(),
        threshold=settings.SEARCH_SIMILARITY_THRESHOLD if threshold is None else threshold,
        now=moment,
        when=when,
        feedback=memory_feedback(agent),
        limit=top_k,
    )
    hits = memory_hits_completed(agent, hits)
    if record_retrieval:
        _mark_retrieved(agent, [h.id for h in hits if h.source == AGENT_MEMORY], moment)
    search_observe(time.perf_counter() - started)
    return SearchOutcome(
        hits=hits,
        semantic=vector is not None,
        took_ms=round((time.perf_counter() - started) * 1000, 2),
        candidates=len(candidates),
    )


def search_candidates(
    *,
    agent: Agent,
    query: str,
    vector: Sequence[float] | None,
    sources: Sequence[str],
    filters: MemoryFilter,
    now: datetime,
    when: QueryTime,
    validity: Validity = CURRENTLY_VALID,
) -> list[Candidate]:
    """Every source's candidates for the query, not yet ranked (bench/locomo_research.py
    ranks one question's candidates under many knob settings)."""
    candidates: list[Candidate] = []
    if AGENT_MEMORY in sources:
        candidates += memory_candidates(
            agent=agent,
            query=query,
            vector=vector,
            filters=filters,
            now=now,
            validity=validity,
            when=when,
        )
    if AUDIT_LOG in sources or WORKFLOW_STEPS in sources:
        candidates += event_candidates(agent=agent, query=query, vector=vector, sources=sources)
    if KNOWLEDGE_BASE in sources:
        candidates += knowledge_base_candidates(agent=agent, query=query, vector=vector)
    return candidates


def hits_ranked(
    candidates: list[Candidate],
    *,
    weights: SearchWeights,
    threshold: float,
    now: datetime,
    when: QueryTime,
    knobs: RankingKnobs | None = None,
    feedback: Feedback | None = None,
    limit: int | None = None,
) -> list[SearchHit]:
    """The candidates fused and ranked (memory.search.ranking), the first ``limit`` hits, best
    first; ``feedback``: where the pseudo-relevance feedback's cosines come from."""
    knobs = knobs or RankingKnobs.configured()
    fuse_with_feedback(candidates, knobs, when, feedback)
    return ranked(
        candidates, weights=weights, threshold=threshold, now=now, knobs=knobs, limit=limit
    )


def _mark_retrieved(agent: Agent, memory_ids: list[int], moment: datetime) -> None:
    """Hand the retrieval to the recorder thread: publishing a Celery message costs about 2 ms,
    which the search's caller need not wait for."""
    if memory_ids:
        # With the request's context, so the task carries its request id (config.logs).
        _retrievals.put((agent.tenant_id, memory_ids, moment.isoformat(), copy_context()))
        _retrieval_recorder_started()


# Retrievals waiting to be queued for the worker, and the daemon thread that queues them. A
# process that dies with some still here loses only those statistics (decay then sees the
# memories as retrieved a little earlier than they were).
_retrievals: queue.SimpleQueue[tuple[int, list[int], str, Context]] = queue.SimpleQueue()
_recorder_lock = threading.Lock()
_recorder: threading.Thread | None = None
# The most searches one retrieval task records (one transaction, one ledger append).
RETRIEVALS_PER_TASK = 200


def _retrieval_recorder_started() -> None:
    global _recorder
    if _recorder is not None and _recorder.is_alive():
        return
    with _recorder_lock:
        if _recorder is None or not _recorder.is_alive():
            _recorder = threading.Thread(
                target=_record_retrievals, name="retrieval-recorder", daemon=True
            )
            _recorder.start()


def _record_retrievals() -> None:
    from memory.tasks import memories_mark_retrieved_batch_task

    while True:
        waiting = [_retrievals.get()]
        # What piled up while the last batch was being queued leaves as one task per tenant:
        # under load a task (and a ledger append) per search cost the worker more CPU than the
        # searches themselves saved. A batch carries its first search's context (request id).
        with contextlib.suppress(queue.Empty):
            while len(waiting) < RETRIEVALS_PER_TASK:
                waiting.append(_retrievals.get_nowait())
        by_tenant: dict[int, list[tuple[list[int], str, Context]]] = {}
        for tenant_id, memory_ids, at, context in waiting:
            by_tenant.setdefault(tenant_id, []).append((memory_ids, at, context))
        for tenant_id, batch in by_tenant.items():
            retrievals = [(memory_ids, at) for memory_ids, at, _ in batch]
            try:
                batch[0][2].run(memories_mark_retrieved_batch_task.delay, tenant_id, retrievals)
            except Exception:  # a broker outage must not fail a read; decay sees older retrievals
                logger.exception("could not queue retrieval statistics of %d searches", len(batch))


def agent_memory_count(agent: Agent) -> int:
    """The agent's keyword documents (every stored memory has one): its BM25 N, kept by a
    trigger, so reading it costs one primary-key lookup, not a count."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT documents FROM memory_memorysearchtotals WHERE agent_id = %s", [agent.pk]
        )
        row = row_named(cursor)
    return int(row.documents) if row else 0


def memories_nearest(
    *,
    agent: Agent,
    vector: Sequence[float],
    k: int,
    now: datetime | None = None,
    before: tuple[datetime, int] | None = None,
) -> list[tuple[int, float]]:
    """The ``k`` active memories of the agent nearest to ``vector``: (id, cosine distance).

    An agent with few memories is searched through its sign-bit sketches, the nearest few
    hundred ranked by exact distance (SemanticPlan.SKETCH). Otherwise the HNSW index serves it
    with pgvector's iterative scans (0.8+), so the agent, expiry and archive filters never
    starve the result: the index keeps scanning until it has ``k`` rows that pass them, in
    exact distance order (``strict_order``). ``before``: only memories older than
    (valid_from, id), so newer ones never crowd the older out of the ``k``.
    """
    moment = now or timezone.now()
    sql = nearest_sql(agent_memory_count(agent), older=before is not None)
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        hnsw_scan_configure(cursor, ef_search=max(HNSW_EF_SEARCH, 2 * k))
        cursor.execute(
            sql,
            {
                "vector": vector_literal(vector),
                "tenant": agent.tenant_id,
                "agent": agent.pk,
                "now": moment,
                "k": k,
                "before_from": before[0] if before else None,
                "before_id": before[1] if before else None,
            },
        )
        # A vector without a direction (an older install's, before the cleanup migration) has no
        # distance (NULL): it is nobody's neighbour rather than a failed store or search.
        return [
            (int(row.id), float(row.distance))
            for row in rows_named(cursor)
            if row.distance is not None
        ]
