"""Supersession: a memory that states the same thing about the same subject as older ones
closes their validity (``valid_until``) and names itself their successor (``superseded_by``),
each change a ``memory.superseded`` event in the transaction of the write that caused it (or,
for a batch judged after its store, of the Celery task that judged it).

A store (``memory.episodic.services.memories_store``) asks ``consolidation_plan`` before it
takes the tenant's lock (the nearest neighbours and, when configured, the model are read
outside it) and ``supersessions_apply`` inside it. Explicit ids (``supersedes``) are applied in
every mode; the rule's or the model's proposals only under ``CONSOLIDATION_MODE=apply``.
``memories_supersede`` marks supersession after the fact. A batch stored with its
consolidation deferred is judged by ``memories_consolidate`` in a Celery task after the commit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import groupby
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from config.api import ApiError
from config.http import ExternalServiceError
from config.sql import rows_named
from ledger.models import Agent
from ledger.services import EventDraft, events_append, tenant_write_lock
from memory.consolidation.model import model_decide
from memory.consolidation.rules import RuleSettings, rule_verdict
from memory.embeddings.backends import EmbeddingUnavailable, embed_texts, embedder_name
from memory.episodic.policies import content_hash
from memory.models import Memory, MemoryContentEmbedding
from memory.search.selectors import memories_nearest

logger = logging.getLogger(__name__)

SUPERSEDED = "memory.superseded"
# What a deferred judgement (memories_consolidate) found under propose: the older memories the
# stored one would supersede. Changes nothing; the memory's history shows it.
PROPOSED = "memory.supersession_proposed"
# The decision of a memory whose neighbours are judged after the store (memories_consolidate).
DEFERRED = "deferred"
# The most ids one request may name in ``supersedes``.
SUPERSEDES_MAX = 100
EXPLICIT = "explicit"


@dataclass(frozen=True)
class SupersessionCandidate:
    """An older memory the new one supersedes (``applied``) or would supersede (proposed)."""

    id: int
    content: str
    similarity: float | None
    # "explicit", or what decided it: "rule: shared: invoice", "model: UPDATE".
    reason: str
    applied: bool = False

    @property
    def explicit(self) -> bool:
        return self.reason == EXPLICIT


@dataclass(frozen=True)
class Consolidation:
    """What consolidation made of one new memory."""

    mode: str
    # add: a fact of its own; supersede: it replaces older ones; ignore: it repeats one;
    # deferred: its neighbours are judged after the store (memories_consolidate).
    decision: str = "add"
    # "rule", "model", "explicit" or "" (nothing was looked for).
    decided_by: str = ""
    candidates: tuple[SupersessionCandidate, ...] = ()
    model_error: str = ""
    # The new memory's content vector when the rule needed it, for the store to keep
    # (``content_embeddings_keep``) once the memory has its id. Not part of any answer.
    content_vector: list[float] | None = field(default=None, repr=False, compare=False)

    @property
    def supersedes(self) -> list[int]:
        return [c.id for c in self.candidates if c.applied]


def supersedes_check(*, agent: Agent, ids: Sequence[int]) -> None:
    """Refuse ids that are not the agent's memories (400 ``unknown_memory``, the same answer for
    another agent's or tenant's id as for a missing one) or that are superseded already."""
    if len(ids) > SUPERSEDES_MAX:
        raise ApiError(
            code="invalid_supersedes",
            message=f"supersedes names at most {SUPERSEDES_MAX} memories.",
        )
    if len(set(ids)) != len(ids):
        raise ApiError(code="invalid_supersedes", message="supersedes names a memory twice.")
    found = dict(
        Memory.objects.filter(tenant_id=agent.tenant_id, agent=agent, pk__in=ids).values_list(
            "pk", "superseded_by"
        )
    )
    unknown = sorted(set(ids) - set(found))
    if unknown:
        raise ApiError(
            code="unknown_memory",
            message=f"No memory of agent {agent.name} has the id(s) "
            f"{', '.join(map(str, unknown))}.",
            details={"unknown": unknown},
        )
    already = sorted(pk for pk, successor in found.items() if successor is not None)
    if already:
        raise ApiError(
            code="invalid_supersedes",
            message=f"Memory {already[0]} is superseded already (by memory {found[already[0]]}).",
            details={"superseded": already},
        )


def consolidation_plan(
    *,
    agent: Agent,
    memory: Memory,
    explicit: Sequence[int] = (),
    use_model: bool = True,
    deferred: bool = False,
) -> Consolidation:
    """What to supersede for ``memory`` (embedded; stored already when judged by
    ``memories_consolidate``): the ``explicit`` ids, and under ``CONSOLIDATION_MODE`` propose
    or apply the older valid neighbours the rule (or the model, when configured and
    ``use_model``) finds stating the same thing about the same subject. ``deferred``: the
    neighbours are left for ``memories_consolidate`` (decision ``deferred``). Reads only;
    ``supersedes_check`` has vetted ``explicit``."""
    mode = settings.CONSOLIDATION_MODE
    candidates = [
        SupersessionCandidate(id=pk, content=content, similarity=None, reason=EXPLICIT)
        for pk, content in Memory.objects.filter(pk__in=explicit).values_list("pk", "content")
    ]
    plan = Consolidation(mode=mode, candidates=tuple(candidates))
    if candidates:
        plan = replace(plan, decision="supersede", decided_by=EXPLICIT)
    if mode == "off" or memory.embedding is None:
        return plan
    if deferred:
        return plan if candidates else replace(plan, decision=DEFERRED)
    neighbours = _older_neighbours(agent, memory, exclude=set(explicit))
    if not neighbours:
        return plan
    found: Consolidation | None = None
    if use_model and settings.CONSOLIDATION_LLM_URL:
        found = _model_plan(memory, neighbours, mode)
    if found is None or found.model_error:
        error = found.model_error if found is not None else ""
        found = replace(_rule_plan(memory, neighbours, mode), model_error=error)
    if candidates:  # the caller's word stands; the found ones join it
        return replace(plan, candidates=plan.candidates + found.candidates)
    return found


@dataclass(frozen=True)
class _Neighbour:
    id: int
    content: str
    similarity: float
    speaker: str = ""


def _older_neighbours(agent: Agent, memory: Memory, exclude: set[int]) -> list[_Neighbour]:
    """The agent's nearest still-valid memories that began no later than ``memory``, with the
    cosine of their stored vectors."""
    return _older_neighbours_each(agent, [memory], exclude)[0]


def _older_neighbours_each(
    agent: Agent,
    memories: Sequence[Memory],
    exclude: AbstractSet[int] = frozenset(),
) -> list[list[_Neighbour]]:
    """``_older_neighbours`` of several memories of the agent, their rows read in one query."""
    similarities = []
    for memory in memories:
        assert memory.embedding is not None
        nearest = memories_nearest(
            agent=agent,
            vector=list(memory.embedding),
            k=settings.CONSOLIDATION_NEIGHBOURS,
            # A memory not stored yet comes after every stored one of its start.
            before=(memory.valid_from, memory.pk or NEWEST_ID),
        )
        similarities.append({pk: 1.0 - d for pk, d in nearest if pk not in exclude})
    rows = Memory.objects.filter(pk__in={pk for found in similarities for pk in found}).only(
        "id", "content", "role", "metadata", "speaker"
    )
    by_id = {row.pk: row for row in rows}
    return [
        sorted(
            (
                _Neighbour(pk, row.content, round(cosine, 4), row.speaker_named)
                for pk, cosine in found.items()
                if (row := by_id.get(pk)) is not None
            ),
            key=lambda n: -n.similarity,
        )
        for found in similarities
    ]


# Larger than any id: a memory not stored yet is newer than every stored one of its start.
NEWEST_ID = 2**63 - 1


def _by_content(memory: Memory, neighbours: list[_Neighbour]) -> _ByContent:
    """The neighbours with their cosine to ``memory`` by content alone.

    The stored vectors embed "[date] speaker: content" (what search ranks best by), so two
    statements of one fact months apart look less alike than the same two a day apart; whether
    one replaces the other is a question about their content. So these few are compared by
    their content vectors (``MemoryContentEmbedding``, embedded in one call where missing);
    with the embedder down the stored vectors' cosine serves.
    """
    return _by_content_each([(memory, neighbours)])[0]


@dataclass(frozen=True)
class _ByContent:
    neighbours: list[_Neighbour]
    # The judged memory's own content vector, when it was needed (a memory with neighbours).
    content_vector: list[float] | None = None


def _by_content_each(judged: Sequence[tuple[Memory, list[_Neighbour]]]) -> list[_ByContent]:
    """``_by_content`` for several memories: the content vectors kept for the stored ones are
    read in one query, and every other text embedded in one call (the embedder runs a call's
    texts in length-sorted pieces: twice the texts per second of one memory's few,
    docs/embeddings.md) and kept for next time."""
    compared = [(memory, neighbours) for memory, neighbours in judged if neighbours]
    if not compared:
        return [_ByContent(neighbours) for _, neighbours in judged]
    contents = {n.id: n.content for _, neighbours in compared for n in neighbours}
    contents.update((m.pk, m.content) for m, _ in compared if m.pk is not None)
    # A memory's neighbours are its agent's, so of its tenant.
    tenant_of = {n.id: m.tenant_id for m, neighbours in compared for n in neighbours}
    tenant_of.update((m.pk, m.tenant_id) for m, _ in compared if m.pk is not None)
    try:
        model = embedder_name()
        kept = content_embeddings_kept(contents, model=model)
        texts = list(
            dict.fromkeys(
                text
                for memory, neighbours in compared
                for pk, text in [
                    (memory.pk, memory.content),
                    *((n.id, n.content) for n in neighbours),
                ]
                if pk is None or pk not in kept
            )
        )
        embedded = dict(zip(texts, embed_texts(texts), strict=True)) if texts else {}
    except EmbeddingUnavailable:
        return [_ByContent(neighbours) for _, neighbours in judged]
    content_embeddings_keep(
        {
            pk: (tenant_of[pk], content, embedded[content])
            for pk, content in contents.items()
            if pk not in kept
        },
        model=model,
    )

    def vector_of(pk: int | None, content: str) -> list[float]:
        return kept[pk] if pk is not None and pk in kept else embedded[content]

    answers = []
    for memory, neighbours in judged:
        if not neighbours:
            answers.append(_ByContent(neighbours))
            continue
        own = vector_of(memory.pk, memory.content)
        by_content = [
            replace(n, similarity=round(_dot(own, vector_of(n.id, n.content)), 4))
            for n in neighbours
        ]
        answers.append(_ByContent(by_content, own))
    return answers


def content_embeddings_kept(contents: dict[int, str], *, model: str) -> dict[int, list[float]]:
    """The kept content vectors of these memories (id: content) that ``model`` made from the
    content they hold now."""
    rows = MemoryContentEmbedding.objects.filter(
        memory_id__in=list(contents), model=model
    ).values_list("memory_id", "content_hash", "embedding")
    return {
        pk: [float(value) for value in vector]
        for pk, digest, vector in rows
        if digest == content_hash(contents[pk])
    }


def content_embeddings_keep_planned(stored: Sequence[tuple[Memory, Consolidation]]) -> None:
    """Keep the content vectors that the plans of memories just stored computed: they had no id
    when their neighbours were judged."""
    vectors = {
        memory.pk: (memory.tenant_id, memory.content, plan.content_vector)
        for memory, plan in stored
        if plan.content_vector is not None
    }
    if vectors:
        # No savepoint: these memories were inserted by this transaction, nobody can delete them.
        _content_embeddings_upsert(vectors, model=embedder_name())


def content_embeddings_keep(
    vectors: dict[int, tuple[int, str, list[float]]], *, model: str
) -> None:
    """Keep content vectors (memory id: (tenant id, content, vector)) of stored memories,
    replacing older ones. Derived data: a memory deleted meanwhile just gets none (its foreign
    key is checked at once, so only this savepoint fails)."""
    if not vectors:
        return
    try:
        with transaction.atomic():
            _content_embeddings_upsert(vectors, model=model)
    except IntegrityError:  # a memory deleted between the read and the insert
        logger.info("content vectors of %d memories not kept: one was deleted", len(vectors))


def _content_embeddings_upsert(
    vectors: dict[int, tuple[int, str, list[float]]], *, model: str
) -> None:
    MemoryContentEmbedding.objects.bulk_create(
        [
            MemoryContentEmbedding(
                memory_id=pk,
                tenant_id=tenant_id,
                content_hash=content_hash(content),
                model=model,
                embedding=vector,
            )
            for pk, (tenant_id, content, vector) in sorted(vectors.items())  # one lock order
        ],
        update_conflicts=True,
        unique_fields=["memory"],
        update_fields=["content_hash", "model", "embedding"],
    )


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


# The stored vectors embed "[date] speaker: content". With one speaker that shared frame lifts
# their cosine above the content's: over bench/supersession.py's 139 pairs (changes of a fact
# 30-60 days apart and their distractors) the stored cosine was never more than 0.022 below the
# content cosine (median 0.09-0.16 above). So a neighbour of the same speaker whose stored cosine
# is more than this margin under the threshold cannot reach it by content, and is not embedded
# again. Two speakers' frames differ (their stored cosine fell up to 0.27 below), so a
# neighbour of another speaker is always embedded again.
STORED_COSINE_MARGIN = 0.05


def _could_reach(neighbour: _Neighbour, memory: Memory, threshold: float) -> bool:
    return (
        neighbour.speaker != memory.speaker_named
        or neighbour.similarity >= threshold - STORED_COSINE_MARGIN
    )


def _shares_subject(memory: Memory, neighbour: _Neighbour, rule: RuleSettings) -> bool:
    """The rule's word tests alone: would it supersede (or call a restatement) at any cosine?"""
    verdict = rule_verdict(new=memory.content, old=neighbour.content, similarity=1.0, rule=rule)
    return verdict.supersedes or verdict.reason == "restatement"


def _rule_settings() -> RuleSettings:
    return RuleSettings(
        threshold=settings.CONSOLIDATION_SIMILARITY_THRESHOLD,
        min_shared=settings.CONSOLIDATION_MIN_SHARED_WORDS,
    )


def _hopeful(memory: Memory, neighbours: list[_Neighbour], rule: RuleSettings) -> list[_Neighbour]:
    """The neighbours worth embedding again: by their stored vectors' cosine (see
    STORED_COSINE_MARGIN) and by the subject test, which reads words only."""
    return [
        n
        for n in neighbours
        if _could_reach(n, memory, rule.threshold) and _shares_subject(memory, n, rule)
    ]


def _rule_plan(memory: Memory, neighbours: list[_Neighbour], mode: str) -> Consolidation:
    rule = _rule_settings()
    compared = _by_content(memory, _hopeful(memory, neighbours, rule))
    plan = _rule_judgement(memory, compared.neighbours, mode)
    return replace(plan, content_vector=compared.content_vector)


def _rule_judgement(
    memory: Memory, hopeful: list[_Neighbour], mode: str, rule: RuleSettings | None = None
) -> Consolidation:
    """The rule's plan from the hopeful neighbours, with their cosine by content."""
    rule = rule or _rule_settings()
    candidates = []
    repeats = False
    for neighbour in hopeful:
        verdict = rule_verdict(
            new=memory.content, old=neighbour.content, similarity=neighbour.similarity, rule=rule
        )
        if verdict.supersedes:
            candidates.append(
                SupersessionCandidate(
                    neighbour.id,
                    neighbour.content,
                    neighbour.similarity,
                    "rule: " + verdict.reason,
                )
            )
        repeats = repeats or (
            verdict.reason == "restatement" and neighbour.similarity >= rule.threshold
        )
    decision = "supersede" if candidates else ("ignore" if repeats else "add")
    return Consolidation(
        mode=mode, decision=decision, decided_by="rule", candidates=tuple(candidates)
    )


def _model_plan(memory: Memory, neighbours: list[_Neighbour], mode: str) -> Consolidation | None:
    shown = [
        n
        for n in _by_content(memory, neighbours).neighbours
        if n.similarity >= settings.CONSOLIDATION_LLM_MIN_SIMILARITY
    ]
    if not shown:
        return None
    try:
        decided = model_decide(new=memory.content, neighbours=[n.content for n in shown])
    except ExternalServiceError as exc:
        logger.warning("consolidation falls back to the rule: %s", exc)
        return Consolidation(mode=mode, model_error=str(exc))
    candidates = tuple(
        SupersessionCandidate(shown[i].id, shown[i].content, shown[i].similarity, f"model: {event}")
        for i, event in sorted(decided.superseded.items())
    )
    decision = "supersede" if candidates else ("add" if decided.adds else "ignore")
    return Consolidation(mode=mode, decision=decision, decided_by="model", candidates=candidates)


SUPERSEDE_SQL = """
UPDATE memory_memory AS m
SET valid_until = coalesce(%(valid_until)s::timestamptz, greatest(m.valid_from, %(valid_from)s)),
    superseded_by = %(successor)s,
    updated_at = %(now)s
WHERE m.tenant_id = %(tenant)s AND m.agent_id = %(agent)s AND m.id = ANY(%(ids)s)
  AND m.superseded_by IS NULL AND m.id <> %(successor)s
RETURNING m.id, m.valid_until
"""


def supersessions_apply(
    *,
    memory: Memory,
    plan: Consolidation,
    actor: str,
    now: datetime,
    valid_until: datetime | None = None,
) -> Consolidation:
    """Supersede, by the stored ``memory``, the plan's explicit candidates and, under apply, the
    found ones: one ``memory.superseded`` event each. Runs in the caller's transaction, under
    the tenant's lock; an explicit id superseded meanwhile by someone else is refused, a found
    one is left as a proposal.

    Each one's validity ends where ``memory``'s begins, or at ``valid_until`` when given (an
    import restores the recorded end); ``now`` is their ``updated_at``."""
    wanted = [c.id for c in plan.candidates if c.explicit or plan.mode == "apply"]
    if not wanted:
        return plan
    tenant_write_lock(memory.tenant)
    with connection.cursor() as cursor:
        cursor.execute(
            SUPERSEDE_SQL,
            {
                "tenant": memory.tenant_id,
                "agent": memory.agent_id,
                "ids": wanted,
                "successor": memory.pk,
                "valid_from": memory.valid_from,
                "valid_until": valid_until,
                "now": now,
            },
        )
        closed = {int(row.id): row.valid_until for row in rows_named(cursor)}
    lost = [c.id for c in plan.candidates if c.explicit and c.id not in closed]
    if lost:
        raise ApiError(
            code="invalid_supersedes",
            message=f"Memory {lost[0]} was superseded by another memory meanwhile.",
            details={"superseded": lost},
        )
    candidates = tuple(replace(c, applied=c.id in closed) for c in plan.candidates)
    events_append(
        tenant=memory.tenant,
        drafts=[
            EventDraft(
                kind=SUPERSEDED,
                actor=actor,
                payload=_superseded_payload(memory, candidate, closed[candidate.id], now),
            )
            for candidate in candidates
            if candidate.applied
        ],
    )
    return replace(plan, candidates=candidates)


def _superseded_payload(
    memory: Memory, candidate: SupersessionCandidate, valid_until: datetime, now: datetime
) -> dict[str, Any]:
    """No content: the texts stay sealed in their own memories' events."""
    return {
        "memory_id": candidate.id,
        "agent_id": memory.agent_id,
        "superseded_by": memory.pk,
        "valid_until": valid_until.isoformat(),
        "updated_at": now.isoformat(),
        "reason": candidate.reason,
        "similarity": candidate.similarity,
    }


def memories_supersede(*, memory: Memory, ids: Sequence[int], actor: str) -> Consolidation:
    """``memory`` supersedes the agent's memories ``ids`` now, whatever it superseded before."""
    agent = memory.agent
    if memory.pk in ids:
        raise ApiError(code="invalid_supersedes", message="A memory cannot supersede itself.")
    supersedes_check(agent=agent, ids=ids)
    plan = Consolidation(
        mode=settings.CONSOLIDATION_MODE,
        decision="supersede",
        decided_by=EXPLICIT,
        candidates=tuple(
            SupersessionCandidate(id=pk, content=content, similarity=None, reason=EXPLICIT)
            for pk, content in Memory.objects.filter(pk__in=ids).values_list("pk", "content")
        ),
    )
    with transaction.atomic():
        return supersessions_apply(memory=memory, plan=plan, actor=actor, now=timezone.now())


def memories_consolidate(*, memory_ids: Sequence[int], actor: str) -> int:
    """Judge stored memories (a batch stored with its consolidation deferred) as a store would
    have, in the order they were stored: each against the neighbours that began before it, its
    batch-mates included. The batch's neighbours are read, and their texts embedded, before
    any is judged, so a neighbour that an earlier memory of the batch supersedes is left as
    that one left it (a proposal of the later one, never superseded twice). Under apply the found
    ones are superseded (``memory.superseded``); under propose the finding is recorded as one
    ``memory.supersession_proposed`` event that changes nothing. A memory deleted, superseded
    or left without a vector meanwhile is skipped. Returns how many events were written."""
    mode = settings.CONSOLIDATION_MODE
    if mode == "off":
        return 0
    pending = (
        Memory.objects.filter(pk__in=memory_ids, superseded_by__isnull=True)
        .exclude(embedding=None)
        .select_related("agent", "tenant")
        .order_by("id")
    )
    memories = list(pending)
    rule = _rule_settings()
    # Every memory's neighbours first and their texts embedded in one call; a neighbour that an
    # earlier memory of the batch supersedes meanwhile stays a proposal (SUPERSEDE_SQL skips it).
    by_agent: dict[int, list[Memory]] = {}
    for memory in memories:
        by_agent.setdefault(memory.agent_id, []).append(memory)
    neighbours_of: dict[int, list[_Neighbour]] = {}
    for agent_memories in by_agent.values():
        lists = _older_neighbours_each(agent_memories[0].agent, agent_memories)
        neighbours_of.update((m.pk, n) for m, n in zip(agent_memories, lists, strict=True))
    hopeful = [_hopeful(memory, neighbours_of[memory.pk], rule) for memory in memories]
    judged = _by_content_each(list(zip(memories, hopeful, strict=True)))
    plans = [
        (memory, _rule_judgement(memory, compared.neighbours, mode, rule))
        for memory, compared in zip(memories, judged, strict=True)
    ]
    found = [(memory, plan) for memory, plan in plans if plan.candidates]
    if not found:
        return 0
    # One transaction for the batch (supersessions_apply takes the tenant's lock, once: it is
    # held to the commit): the stores this runs beside wait for that lock once, not per memory.
    with transaction.atomic():
        if mode == "apply":
            now = timezone.now()
            return sum(
                len(supersessions_apply(memory=memory, plan=plan, actor=actor, now=now).supersedes)
                for memory, plan in found
            )
        # By tenant, in ascending id order (the order tenant locks are taken in).
        for _, group in groupby(
            sorted(found, key=lambda f: f[0].tenant_id), lambda f: f[0].tenant_id
        ):
            proposals = list(group)
            tenant = proposals[0][0].tenant
            tenant_write_lock(tenant)
            events_append(
                tenant=tenant,
                drafts=[
                    EventDraft(
                        kind=PROPOSED, actor=actor, payload=_proposed_payload(m, p.candidates)
                    )
                    for m, p in proposals
                ],
            )
    return len(found)


def _proposed_payload(memory: Memory, found: Sequence[SupersessionCandidate]) -> dict[str, Any]:
    """No content, as for a supersession: the ids, why, and the cosine."""
    reasons = "; ".join(f"memory {c.id} ({c.reason})" for c in found)
    return {
        "memory_id": memory.pk,
        "agent_id": memory.agent_id,
        "reason": f"would supersede {reasons}",
        "candidates": [
            {"memory_id": c.id, "reason": c.reason, "similarity": c.similarity} for c in found
        ],
    }
