"""Writes of rounds and dissents: posting a round and its participants, finalising and revising its
output, logging a dissent with its depth, setting its impact, and embedding the dissents logged
while the embedder was down. Overrides and regret are in trust.rounds.overrides.

Each service takes the tenant's ledger lock first (the lock order every writer shares), then
writes its rows and the events that record them in one transaction, so a refused request leaves
nothing behind and a rebuild from the ledger (trust.rounds.projection) gets the same rows."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from config.api import ApiError, Conflict
from ledger.jobs import Batch, batches_until_short
from ledger.models import Agent, Tenant
from ledger.services import EventDraft, event_append, tenant_write_lock
from memory.embeddings.backends import EmbeddingUnavailable, embed_texts, embedder_name
from memory.embeddings.backfill import EMBEDDING_BACKFILL_BATCH, derived_vectors_replace
from memory.embeddings.local_embedder import DIMENSIONS as LOCAL_DIMENSIONS
from trust.governance import services as governance
from trust.governance.models import RubricVersion
from trust.governance.selectors import rubric_current
from trust.rounds import selectors
from trust.rounds.models import (
    ArtifactVersion,
    Dissent,
    DissentEmbedding,
    Override,
    Round,
    RoundParticipant,
)
from trust.rounds.overrides import overrides_infer_regret, overrides_mark_reverted
from trust.rounds.policies import occurred_at_check, texts_check
from trust.scores.scoring import Depth, dissent_depth, text_hash
from trust.scores.services import trust_recompute

logger = logging.getLogger(__name__)


EMBEDDING_BATCH = 64


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
    texts_check(final_output=final_output)
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
    texts_check(content=content)
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
        overrides_mark_reverted(
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
    rubric = rubric_current(tenant=tenant)
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
    texts_check(text=text)
    occurred = occurred_at_check(occurred_at, moment)
    citations = rubric_citations_canonical(tenant=agent.tenant, citations=rubric_citations)
    # Embedding is a network call: made before the lock, so writers never queue behind it.
    vectors, model = embed_or_none([text])
    # No savepoint inside the request's transaction: nothing in here is refused, and a failure
    # fails the request anyway (two statements fewer while holding the tenant's lock).
    with transaction.atomic(savepoint=False):
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
            causes={agent.pk: {"dissent_id": dissent.pk, "by": actor, "round_id": round_id}},
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
            causes={
                locked.agent_id: {
                    "dissent_id": locked.pk,
                    "by": actor,
                    "round_id": locked.round_id,
                }
            },
        )
    return locked


def dissent_embeddings_backfill(*, batch_size: int = EMBEDDING_BACKFILL_BATCH) -> int:
    """Embed dissents logged while the embedder was down, or embedded by another model than the
    configured one (memory.embeddings.backfill.vector_pending says why). Returns rows written;
    idempotent.

    Their depth stays as logged (it is in the ledger); the vectors only serve the novelty of
    later dissents.
    """
    try:
        current = embedder_name()
    except EmbeddingUnavailable:
        return 0
    pending = list(
        Dissent.objects.exclude(
            pk__in=DissentEmbedding.objects.filter(model=current).values("dissent_id")
        ).order_by("id")[:batch_size]
    )
    added = 0
    for start in range(0, len(pending), EMBEDDING_BATCH):
        batch = pending[start : start + EMBEDDING_BATCH]
        vectors, model = embed_or_none([d.text for d in batch])
        if vectors is None:
            break
        added += derived_vectors_replace(
            table=DissentEmbedding,
            key="dissent_id",
            rows=[
                DissentEmbedding(
                    tenant_id=d.tenant_id,
                    dissent_id=d.pk,
                    agent_id=d.agent_id,
                    embedding=v,
                    model=model,
                )
                for d, v in zip(batch, vectors, strict=True)
            ],
            model=model,
        )
    return added


def dissent_embeddings_backfill_batches() -> Iterator[Batch]:
    """The backfill job (trust.tasks): full batches until one comes back short."""
    return batches_until_short(
        lambda n: dissent_embeddings_backfill(batch_size=n), batch_size=EMBEDDING_BACKFILL_BATCH
    )
