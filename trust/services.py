"""Writes of the trust core: rounds, dissents, overrides, regret inference and trust scores.

Each service takes the tenant's ledger lock first (the lock order every writer shares), then
writes its rows and the events that record them in one transaction, so a refused request leaves
nothing behind and a rebuild from the ledger (trust.projection) gets the same rows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from config.api import ApiError, Conflict
from config.metrics import trust_recompute_counted
from ledger.models import Agent, Event, Tenant
from ledger.services import SYSTEM_ACTOR, EventDraft, event_append, events_append, tenant_write_lock
from memory.embeddings import EmbeddingUnavailable, embed_texts, embedder_name
from memory.local_embedder import DIMENSIONS as LOCAL_DIMENSIONS
from trust import governance, selectors
from trust.models import (
    ArtifactVersion,
    Dissent,
    DissentEmbedding,
    Override,
    Round,
    RoundParticipant,
    RubricVersion,
    TrustScoreChange,
)
from trust.scoring import Depth, dissent_depth, text_hash, trust_score

logger = logging.getLogger(__name__)

TEXT_MAX_CHARS = 20_000
EMBEDDING_BATCH = 64

TRUST_EVENT_KINDS = frozenset(
    {
        "round.participants_added",
        "round.finalized",
        "round.output_revised",
        "dissent.logged",
        "dissent.impact_set",
        "override.logged",
        "override.reverted",
        "trust.score_changed",
        "trust.rounds_imported",
    }
)


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _text_problem(text: str, *, field: str) -> ApiError | None:
    if not text.strip():
        return ApiError(
            code="empty_text",
            message=f"{field} is empty or only whitespace.",
            details={"field": field},
        )
    if len(text) > TEXT_MAX_CHARS:
        return ApiError(
            code="text_too_long",
            message=f"{field} has {len(text)} characters; the limit is {TEXT_MAX_CHARS}.",
            details={"field": field, "limit": TEXT_MAX_CHARS},
        )
    return None


def _check_texts(**texts: str) -> None:
    for field, text in texts.items():
        problem = _text_problem(text, field=field)
        if problem is not None:
            raise problem


def _check_not_future(occurred_at: datetime | None, now: datetime) -> datetime:
    if occurred_at is None:
        return now
    if occurred_at > now:
        raise ApiError(
            code="occurred_in_future",
            message="occurred_at lies in the future.",
            details={"occurred_at": occurred_at.isoformat()},
        )
    return occurred_at


# --- Trust scores ------------------------------------------------------------------------------


@trust_recompute_counted
def trust_recompute(
    *,
    tenant: Tenant,
    agent_ids: Sequence[int] | None = None,
    reason: str,
    now: datetime | None = None,
    preceded_by: Sequence[EventDraft] = (),
) -> int:
    """Recompute scores (all of the tenant's agents by default); record the ones that changed.

    One evidence query for all agents, one bulk insert of history rows, one batch of
    ``trust.score_changed`` events and one UPDATE of the agents, so a tenant-wide recompute does
    not cost a query per agent. ``preceded_by`` are the caller's events, appended in the same
    batch just before the score changes (one chain append instead of two). Returns how many
    scores changed.
    """
    moment = now or timezone.now()
    # Inside a caller's transaction no savepoint: a failure here fails the caller anyway.
    with transaction.atomic(savepoint=False):
        tenant_write_lock(tenant)
        evidence = selectors.trust_evidence(tenant=tenant, agent_ids=agent_ids, now=moment)
        current = dict(
            Agent.objects.filter(tenant=tenant, pk__in=list(evidence)).values_list(
                "pk", "trust_score"
            )
        )
        changes: list[TrustScoreChange] = []
        previous: dict[int, float] = {}
        for agent_id in sorted(evidence):
            breakdown = trust_score(
                evidence[agent_id], prior_strength=settings.TRUST_PRIOR_STRENGTH
            )
            if agent_id not in current or breakdown.score == round(current[agent_id], 6):
                continue
            previous[agent_id] = current[agent_id]
            changes.append(
                TrustScoreChange(
                    tenant=tenant,
                    agent_id=agent_id,
                    at=moment,
                    score=breakdown.score,
                    reason=reason,
                    components=breakdown.as_dict(),
                )
            )
        if not changes:
            events_append(tenant=tenant, drafts=list(preceded_by))
            return 0
        changes = TrustScoreChange.objects.bulk_create(changes)
        events_append(
            tenant=tenant,
            drafts=[
                *preceded_by,
                *(
                    EventDraft(
                        kind="trust.score_changed",
                        actor=SYSTEM_ACTOR,
                        payload=score_changed_payload(change, previous[change.agent_id]),
                    )
                    for change in changes
                ),
            ],
        )
        _agents_set_scores(
            {change.agent_id: change.score for change in changes},
        )
    return len(changes)


def score_changed_payload(change: TrustScoreChange, previous: float | None) -> dict[str, Any]:
    return {
        "change_id": change.pk,
        "agent_id": change.agent_id,
        "score": change.score,
        "previous": previous,
        "reason": change.reason,
        "at": change.at.isoformat(),
        "components": change.components,
    }


def _agents_set_scores(scores: dict[int, float]) -> None:
    if not scores:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE ledger_agent a SET trust_score = s.score
            FROM unnest(%s::bigint[], %s::float8[]) AS s(id, score)
            WHERE a.id = s.id
            """,
            [list(scores), list(scores.values())],
        )


# --- Rounds ------------------------------------------------------------------------------------


def rounds_post(
    *,
    tenant: Tenant,
    round_id: str,
    run_id: str = "",
    participants: Sequence[str],
    actor: str,
    now: datetime | None = None,
) -> Round:
    """Create a round or add participants to it. Each new participant's round counts once
    toward its ``rounds_participated``; posting the same participant again adds nothing."""
    moment = now or timezone.now()
    names = list(dict.fromkeys(participants))
    with transaction.atomic():
        tenant_write_lock(tenant)
        agents = selectors.agents_named(tenant=tenant, names=names)
        round_ = Round.objects.select_for_update().filter(tenant=tenant, round_id=round_id).first()
        created = round_ is None
        if round_ is None:
            round_ = Round.objects.create(
                tenant=tenant, round_id=round_id, run_id=run_id, created_at=moment
            )
        elif run_id and round_.run_id != run_id:
            raise Conflict(
                code="round_run_mismatch",
                message=f"Round {round_id!r} belongs to run {round_.run_id!r}, not {run_id!r}.",
                details={"run_id": round_.run_id},
            )
        present = set(
            RoundParticipant.objects.filter(round=round_).values_list("agent_id", flat=True)
        )
        added = [agents[name] for name in names if agents[name].pk not in present]
        if not added and not created:
            return round_
        RoundParticipant.objects.bulk_create(
            [
                RoundParticipant(tenant=tenant, round=round_, agent=agent, joined_at=moment)
                for agent in added
            ]
        )
        Agent.objects.filter(pk__in=[a.pk for a in added]).update(
            rounds_participated=F("rounds_participated") + 1
        )
        event_append(
            tenant=tenant,
            kind="round.participants_added",
            actor=actor,
            run_id=round_.run_id,
            round_id=round_.round_id,
            payload={
                "round_pk": round_.pk,
                "round_id": round_.round_id,
                "run_id": round_.run_id,
                "agents": [{"id": a.pk, "name": a.name} for a in added],
                "at": moment.isoformat(),
            },
        )
    return round_


def round_finalize(
    *, round: Round, final_output: str, actor: str, now: datetime | None = None
) -> Round:
    """Set the round's final output (artifact version 1), then infer regret for its overrides.

    Finalising again with the same normalised output answers as before; a different output is
    refused, since the overrides of the round were already judged against the first one.
    """
    _check_texts(final_output=final_output)
    moment = now or timezone.now()
    digest = text_hash(final_output)
    with transaction.atomic():
        tenant_write_lock(round.tenant)
        locked: Round = Round.objects.select_for_update().get(pk=round.pk)
        if locked.is_finalized:
            if text_hash(locked.final_output) != digest:
                raise Conflict(
                    code="round_already_finalized",
                    message="This round already has a different final output; "
                    "post a newer version instead.",
                    details={"output_version": locked.output_version},
                )
            return locked
        locked.final_output = final_output
        locked.finalized_at = moment
        locked.finalized_by = actor
        _round_output_write(
            round=locked,
            number=1,
            content=final_output,
            author=actor,
            actor=actor,
            kind="round.finalized",
            payload={"final_output": final_output, "output_hash": digest},
            now=moment,
        )
        overrides_infer_regret(tenant=locked.tenant, round=locked, now=moment)
    return locked


def round_revise(
    *, round: Round, content: str, author: str, actor: str, now: datetime | None = None
) -> ArtifactVersion:
    """Post a newer version of the round's artifact.

    An open override whose agent output this version restores (and whose human decision it does
    not keep) was undone by it: regret at once, reverted by the version's author.
    """
    _check_texts(content=content)
    moment = now or timezone.now()
    digest = text_hash(content)
    with transaction.atomic():
        tenant_write_lock(round.tenant)
        locked: Round = Round.objects.select_for_update().get(pk=round.pk)
        if not locked.is_finalized:
            raise Conflict(
                code="round_not_finalized",
                message="Finalise the round before posting newer versions of its output.",
            )
        number = locked.output_version + 1
        version = _round_output_write(
            round=locked,
            number=number,
            content=content,
            author=author,
            actor=actor,
            kind="round.output_revised",
            payload={
                "version": number,
                "content": content,
                "content_hash": digest,
                "author": author,
            },
            now=moment,
        )
        undone = list(
            Override.objects.filter(
                tenant=locked.tenant,
                round_id=locked.round_id,
                reverted_at__isnull=True,
                agent_output_hash=digest,
            )
            .exclude(decision_hash=digest)
            .values_list("pk", flat=True)
        )
        _overrides_mark_reverted(
            tenant=locked.tenant,
            override_ids=undone,
            reverted_by=author,
            reason=Override.RevertReason.NEWER_VERSION,
            actor=actor,
            now=moment,
        )
    return version


def _round_output_write(
    *,
    round: Round,
    number: int,
    content: str,
    author: str,
    actor: str,
    kind: str,
    payload: dict[str, Any],
    now: datetime,
) -> ArtifactVersion:
    """Make ``content`` the round's current output (version ``number``) and log ``kind``."""
    digest = text_hash(content)
    version = ArtifactVersion.objects.create(
        tenant=round.tenant,
        round=round,
        number=number,
        content=content,
        content_hash=digest,
        author=author,
        created_at=now,
    )
    round.output = content
    round.output_hash = digest
    round.output_version = number
    round.save()
    event_append(
        tenant=round.tenant,
        kind=kind,
        actor=actor,
        run_id=round.run_id,
        round_id=round.round_id,
        payload={
            "round_pk": round.pk,
            "round_id": round.round_id,
            **payload,
            "at": now.isoformat(),
        },
    )
    return version


# --- Dissents ----------------------------------------------------------------------------------


def rubric_citations_canonical(*, tenant: Tenant, citations: Sequence[str]) -> list[str]:
    """The cited criteria spelled as the current rubric spells them, each once, in order.

    Refuses (400 ``unknown_rubric_criterion``) a citation that names no current criterion.
    """
    if not citations:
        return []
    rubric = selectors.rubric_current(tenant=tenant)
    names = [c.name for c in rubric.criteria.all()] if rubric else []
    by_folded = {name.casefold(): name for name in names}
    unknown = [c for c in citations if c.strip().casefold() not in by_folded]
    if unknown:
        raise ApiError(
            code="unknown_rubric_criterion",
            message=f"Not a criterion of the current rubric: {', '.join(map(repr, unknown))}.",
            details={
                "unknown": unknown,
                "valid": names,
                "rubric_version": rubric.number if rubric else None,
            },
        )
    return list(dict.fromkeys(by_folded[c.strip().casefold()] for c in citations))


def embed_or_none(texts: Sequence[str]) -> tuple[list[list[float]] | None, str]:
    """Vectors for the texts, or None while the embedder is down (or of the wrong size)."""
    try:
        vectors = embed_texts(texts)
        model = embedder_name()
    except EmbeddingUnavailable as exc:
        logger.warning("embedding %d dissents later: %s", len(texts), exc)
        return None, ""
    if any(len(vector) != LOCAL_DIMENSIONS for vector in vectors):
        logger.warning("embedder %s does not give %d dimensions", model, LOCAL_DIMENSIONS)
        return None, ""
    return vectors, model


def dissent_logged_payload(dissent: Dissent) -> dict[str, Any]:
    return {
        "dissent_id": dissent.pk,
        "agent_id": dissent.agent_id,
        "round_id": dissent.round_id,
        "occurred_at": dissent.occurred_at.isoformat(),
        "context": dissent.context,
        "text": dissent.text,
        "rubric_citations": list(dissent.rubric_citations),
        "rubric_version": dissent.rubric_version,
        "depth": {
            "length": dissent.length_score,
            "citations": dissent.citation_score,
            "novelty": dissent.novelty,
            "novelty_known": dissent.novelty_known,
            "depth": dissent.depth_score,
        },
        "imported": dissent.imported,
        "at": dissent.created_at.isoformat(),
    }


def dissent_log(
    *,
    agent: Agent,
    text: str,
    round_id: str = "",
    context: dict[str, Any] | None = None,
    rubric_citations: Sequence[str] = (),
    occurred_at: datetime | None = None,
    actor: str,
    now: datetime | None = None,
) -> Dissent:
    """Log a dissent with its depth (SPEC 8), fixed now: length, citations and novelty."""
    moment = now or timezone.now()
    _check_texts(text=text)
    occurred = _check_not_future(occurred_at, moment)
    citations = rubric_citations_canonical(tenant=agent.tenant, citations=rubric_citations)
    # Embedding is a network call: made before the lock, so writers never queue behind it.
    vectors, model = embed_or_none([text])
    with transaction.atomic():
        tenant_write_lock(agent.tenant)
        rubric_version = (
            RubricVersion.objects.filter(tenant=agent.tenant)
            .order_by("-number")
            .values_list("number", flat=True)
            .first()
        )
        similarity = None
        if vectors is not None:
            similarity = selectors.dissent_max_similarity(agent=agent, vector=vectors[0])
        depth = dissent_depth(text=text, citations=len(citations), max_similarity=similarity)
        dissent = Dissent.objects.create(
            tenant=agent.tenant,
            agent=agent,
            round_id=round_id,
            occurred_at=occurred,
            created_at=moment,
            context=context or {},
            text=text,
            rubric_citations=citations,
            rubric_version=rubric_version,
            **_depth_fields(depth, novelty_known=vectors is not None),
        )
        if vectors is not None:
            DissentEmbedding.objects.create(
                tenant=agent.tenant,
                dissent_id=dissent.pk,
                agent=agent,
                embedding=vectors[0],
                model=model,
            )
        trust_recompute(
            tenant=agent.tenant,
            agent_ids=[agent.pk],
            reason="dissent_logged",
            now=moment,
            preceded_by=[
                EventDraft(
                    kind="dissent.logged",
                    actor=actor,
                    round_id=round_id,
                    payload=dissent_logged_payload(dissent),
                )
            ],
        )
        governance.gaming_check(agent=agent, now=moment)
    return dissent


def _depth_fields(depth: Depth, *, novelty_known: bool) -> dict[str, Any]:
    return {
        "length_score": depth.length,
        "citation_score": depth.citations,
        "novelty": depth.novelty,
        "novelty_known": novelty_known,
        "depth_score": depth.depth,
    }


def dissent_set_impact(
    *,
    dissent: Dissent,
    impact: bool,
    feedback_incorporated: bool | None = None,
    actor: str,
    now: datetime | None = None,
) -> Dissent:
    """Record whether the dissent changed the final output. Set once: the same answer again is
    a no-op, a different one is refused (409 ``impact_already_set``)."""
    moment = now or timezone.now()
    with transaction.atomic():
        tenant_write_lock(dissent.tenant)
        locked: Dissent = Dissent.objects.select_for_update().get(pk=dissent.pk)
        if locked.impact is not None:
            same = locked.impact == impact and feedback_incorporated in (
                None,
                locked.feedback_incorporated,
            )
            if same:
                return locked
            raise Conflict(
                code="impact_already_set",
                message="This dissent's impact is already set to a different value.",
                details={
                    "impact": locked.impact,
                    "feedback_incorporated": locked.feedback_incorporated,
                },
            )
        locked.impact = impact
        locked.feedback_incorporated = feedback_incorporated
        locked.impact_set_at = moment
        locked.save(update_fields=["impact", "feedback_incorporated", "impact_set_at"])
        event_append(
            tenant=locked.tenant,
            kind="dissent.impact_set",
            actor=actor,
            round_id=locked.round_id,
            payload={
                "dissent_id": locked.pk,
                "impact": impact,
                "feedback_incorporated": feedback_incorporated,
                "at": moment.isoformat(),
            },
        )
        trust_recompute(
            tenant=locked.tenant,
            agent_ids=[locked.agent_id],
            reason="dissent_impact_true" if impact else "dissent_impact_false",
            now=moment,
        )
    return locked


def dissent_embeddings_backfill(*, batch_size: int = 256) -> int:
    """Embed dissents logged while the embedder was down. Returns rows added; idempotent.

    Their depth stays as logged (it is in the ledger); the vectors only serve the novelty of
    later dissents.
    """
    pending = list(
        Dissent.objects.exclude(pk__in=DissentEmbedding.objects.values("dissent_id")).order_by(
            "id"
        )[:batch_size]
    )
    added = 0
    for start in range(0, len(pending), EMBEDDING_BATCH):
        batch = pending[start : start + EMBEDDING_BATCH]
        vectors, model = embed_or_none([d.text for d in batch])
        if vectors is None:
            break
        created = DissentEmbedding.objects.bulk_create(
            [
                DissentEmbedding(
                    tenant_id=d.tenant_id,
                    dissent_id=d.pk,
                    agent_id=d.agent_id,
                    embedding=v,
                    model=model,
                )
                for d, v in zip(batch, vectors, strict=True)
            ],
            ignore_conflicts=True,
        )
        added += len(created)
    return added


# --- Overrides ---------------------------------------------------------------------------------


def override_logged_payload(override: Override) -> dict[str, Any]:
    return {
        "override_id": override.pk,
        "agent_id": override.agent_id,
        "round_id": override.round_id,
        "occurred_at": override.occurred_at.isoformat(),
        "context": override.context,
        "agent_output": override.agent_output,
        "human_decision": override.human_decision,
        "decided_by": override.decided_by,
        "auto_check_deadline": override.auto_check_deadline.isoformat(),
        "at": override.created_at.isoformat(),
    }


def override_log(
    *,
    agent: Agent,
    agent_output: str,
    human_decision: str,
    decided_by: str,
    round_id: str = "",
    context: dict[str, Any] | None = None,
    occurred_at: datetime | None = None,
    actor: str,
    now: datetime | None = None,
) -> Override:
    """Log that a person replaced the agent's output. Regret is decided later: by inference
    after ``auto_check_deadline``, by a newer version, or by a person marking it."""
    moment = now or timezone.now()
    _check_texts(agent_output=agent_output, human_decision=human_decision)
    occurred = _check_not_future(occurred_at, moment)
    with transaction.atomic():
        tenant_write_lock(agent.tenant)
        override = Override.objects.create(
            tenant=agent.tenant,
            agent=agent,
            round_id=round_id,
            occurred_at=occurred,
            created_at=moment,
            context=context or {},
            agent_output=agent_output,
            human_decision=human_decision,
            agent_output_hash=text_hash(agent_output),
            decision_hash=text_hash(human_decision),
            decided_by=decided_by,
            auto_check_deadline=occurred + timedelta(hours=settings.OVERRIDE_CHECK_HOURS),
        )
        event_append(
            tenant=agent.tenant,
            kind="override.logged",
            actor=actor,
            round_id=round_id,
            payload=override_logged_payload(override),
        )
        trust_recompute(
            tenant=agent.tenant, agent_ids=[agent.pk], reason="override_logged", now=moment
        )
    return override


def override_revert(
    *,
    override: Override,
    reverted_by: str,
    reason: str = Override.RevertReason.MARKED,
    actor: str,
    now: datetime | None = None,
) -> Override:
    """A person marks the override reverted (regret) at once, whatever its deadline."""
    moment = now or timezone.now()
    with transaction.atomic():
        tenant_write_lock(override.tenant)
        marked = _overrides_mark_reverted(
            tenant=override.tenant,
            override_ids=[override.pk],
            reverted_by=reverted_by,
            reason=reason,
            actor=actor,
            now=moment,
        )
        if not marked:
            raise Conflict(
                code="override_already_reverted",
                message="This override was already reverted.",
            )
    override.refresh_from_db()
    return override


def override_confirm(*, override: Override, actor: str, now: datetime | None = None) -> Event:
    """A reviewer's word that the override stands: ``override.confirmed`` in the ledger, by them.

    It changes no row and no score: the evidence stays what it was, regret inference still
    follows the round's output, and a later revert still counts. A reverted override cannot be
    confirmed (409 ``override_already_reverted``).
    """
    moment = now or timezone.now()
    with transaction.atomic():
        tenant_write_lock(override.tenant)
        if Override.objects.filter(pk=override.pk, reverted_at__isnull=False).exists():
            raise Conflict(
                code="override_already_reverted",
                message="This override was already reverted.",
            )
        return event_append(
            tenant=override.tenant,
            kind=selectors.OVERRIDE_CONFIRMED,
            actor=actor,
            round_id=override.round_id,
            payload={
                "override_id": override.pk,
                "agent_id": override.agent_id,
                "confirmed_by": actor,
                "at": moment.isoformat(),
            },
        )


def _overrides_mark_reverted(
    *,
    tenant: Tenant,
    override_ids: Sequence[int],
    reverted_by: str,
    reason: str,
    actor: str,
    now: datetime,
) -> list[int]:
    """Mark still-open overrides as regret in one UPDATE, log one ``override.reverted`` and
    recompute the agents concerned. The caller holds the tenant's lock. Returns the ids marked."""
    if not override_ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE trust_override
            SET regret = true, reverted_by = %(by)s, reverted_at = %(now)s, revert_reason = %(why)s
            WHERE tenant_id = %(tenant)s AND id = ANY(%(ids)s) AND reverted_at IS NULL
            RETURNING id, agent_id
            """,
            {
                "by": reverted_by,
                "now": now,
                "why": reason,
                "tenant": tenant.pk,
                "ids": list(override_ids),
            },
        )
        rows = cursor.fetchall()
    return _after_revert(
        tenant=tenant, rows=rows, reverted_by=reverted_by, reason=reason, actor=actor, now=now
    )


def _after_revert(
    *,
    tenant: Tenant,
    rows: Sequence[tuple[int, int]],
    reverted_by: str,
    reason: str,
    actor: str,
    now: datetime,
) -> list[int]:
    if not rows:
        return []
    ids = sorted(int(row[0]) for row in rows)
    event_append(
        tenant=tenant,
        kind="override.reverted",
        actor=actor,
        payload={
            "override_ids": ids,
            "reverted_by": reverted_by,
            "reason": reason,
            "regret": True,
            "at": now.isoformat(),
        },
    )
    trust_recompute(
        tenant=tenant,
        agent_ids=sorted({int(row[1]) for row in rows}),
        reason="override_regret",
        now=now,
    )
    return ids


# Open overrides past their deadline (strictly) in finalised rounds whose current output is not
# the human decision. The partial index override_open covers the open rows per round.
_INFER_SQL = """
WITH picked AS (
    SELECT o.id
    FROM trust_override o
    JOIN trust_round r ON r.tenant_id = o.tenant_id AND r.round_id = o.round_id
    WHERE o.tenant_id = %(tenant)s
      AND o.reverted_at IS NULL
      AND o.auto_check_deadline < %(now)s
      AND r.finalized_at IS NOT NULL
      AND o.decision_hash <> r.output_hash
      {round_filter}
    ORDER BY o.id
    LIMIT %(limit)s
)
UPDATE trust_override o
SET regret = true, reverted_by = %(by)s, reverted_at = %(now)s, revert_reason = %(why)s
FROM picked
WHERE o.id = picked.id
RETURNING o.id, o.agent_id
"""

_INFER_TENANTS_SQL = """
SELECT DISTINCT o.tenant_id
FROM trust_override o
JOIN trust_round r ON r.tenant_id = o.tenant_id AND r.round_id = o.round_id
WHERE o.reverted_at IS NULL AND o.auto_check_deadline < %(now)s
  AND r.finalized_at IS NOT NULL AND o.decision_hash <> r.output_hash
ORDER BY o.tenant_id
"""


def overrides_infer_regret(
    *,
    tenant: Tenant | None = None,
    round: Round | None = None,
    now: datetime | None = None,
    batch_size: int = 50_000,
) -> int:
    """Mark regret where the deadline passed and the round's output is not the human decision.

    Each batch recomputes the trust of every agent it touched, which costs about the same for 50
    overrides of an agent as for 5,000 (bench/trust_bench.py: 100,000 overrides of 1,000 agents
    took 24 s in batches of 5,000), so batches are large; the UPDATE itself is cheap.

    Set-based, in batches of ``batch_size``, each its own transaction under the tenant's lock
    with one ``override.reverted`` event, so a killed run keeps what it finished and a second run
    (or a concurrent one, which waits for the lock) finds nothing left. Returns overrides marked.
    """
    moment = now or timezone.now()
    if round is not None:
        tenants = [round.tenant]
    elif tenant is not None:
        tenants = [tenant]
    else:
        with connection.cursor() as cursor:
            cursor.execute(_INFER_TENANTS_SQL, {"now": moment})
            tenant_ids = [int(row[0]) for row in cursor.fetchall()]
        tenants = list(Tenant.objects.filter(pk__in=tenant_ids).order_by("pk"))
    sql = _INFER_SQL.format(round_filter="AND r.id = %(round)s" if round is not None else "")
    marked = 0
    for each in tenants:
        while True:
            with transaction.atomic():
                tenant_write_lock(each)
                with connection.cursor() as cursor:
                    cursor.execute(
                        sql,
                        {
                            "tenant": each.pk,
                            "now": moment,
                            "limit": batch_size,
                            "round": round.pk if round is not None else None,
                            "by": SYSTEM_ACTOR,
                            "why": Override.RevertReason.INFERRED.value,
                        },
                    )
                    rows = cursor.fetchall()
                _after_revert(
                    tenant=each,
                    rows=rows,
                    reverted_by=SYSTEM_ACTOR,
                    reason=Override.RevertReason.INFERRED.value,
                    actor=SYSTEM_ACTOR,
                    now=moment,
                )
            marked += len(rows)
            if len(rows) < batch_size:
                break
    return marked
