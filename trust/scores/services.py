"""Writes of trust scores: recompute (on every piece of evidence, nightly as the window slides, or
on an admin's request), recording the scores that changed with their terms and why.

trust_recompute takes the tenant's ledger lock and writes the history rows, their
``trust.score_changed`` events and the agents' scores in one transaction (inside the caller's
when there is one), so a rebuild from the ledger (trust.rounds.projection) gets the same rows."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config.metrics import trust_recompute_counted
from ledger.jobs import Batch, job_progress
from ledger.models import Agent, Tenant
from ledger.services import SYSTEM_ACTOR, EventDraft, events_append, tenant_write_lock
from trust.scores import selectors
from trust.scores.models import TrustScoreChange
from trust.scores.scoring import trust_score


@trust_recompute_counted
def trust_recompute(
    *,
    tenant: Tenant,
    agent_ids: Sequence[int] | None = None,
    reason: str,
    now: datetime | None = None,
    preceded_by: Sequence[EventDraft] = (),
    causes: Mapping[int, dict[str, Any]] | None = None,
) -> int:
    """Recompute scores (all of the tenant's agents by default); record the ones that changed.

    One evidence query for all agents, one bulk insert of history rows, one batch of
    ``trust.score_changed`` events and one UPDATE of the agents, so a tenant-wide recompute does
    not cost a query per agent. ``preceded_by`` are the caller's events, appended in the same
    batch just before the score changes (one chain append instead of two). ``causes`` says, per
    agent id, what caused the change (``TrustScoreChange.cause``). Returns how many scores
    changed.
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
                    cause=(causes or {}).get(agent_id, {}),
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
        "cause": change.cause,
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


def trust_windows_slide_batches(*, job: str) -> Iterator[Batch]:
    """Every tenant's agents in batches, resuming where an unfinished (cut or killed) run of
    ``job`` got to: the nightly recompute as old evidence leaves the window (trust.tasks).

    Recomputing is idempotent (only changed scores are recorded), so a batch redone after a kill
    records nothing twice.
    """
    progress = job_progress(job)
    resume = not progress.get("done", True)
    after_tenant = int(progress.get("after_tenant", 0)) if resume else 0
    after_agent = int(progress.get("after_agent", 0)) if resume else 0
    batch_size = settings.JOB_BATCH_SIZE
    for tenant in Tenant.objects.filter(pk__gte=after_tenant).order_by("pk"):
        after = after_agent if tenant.pk == after_tenant else 0
        while True:
            ids = list(
                Agent.objects.filter(tenant=tenant, pk__gt=after)
                .order_by("pk")
                .values_list("pk", flat=True)[:batch_size]
            )
            if not ids:
                break
            changed = trust_recompute(tenant=tenant, agent_ids=ids, reason="window_slid")
            after = ids[-1]
            yield Batch(
                rows=changed,
                more=True,
                details={"after_tenant": tenant.pk, "after_agent": after, "done": False},
            )
    yield Batch(rows=0, more=False, details={"done": True})
