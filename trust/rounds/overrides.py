"""Writes of overrides: logging one, and deciding its regret, by a person marking it reverted
(``override_revert``), by a newer artifact version restoring the agent's output
(trust.rounds.services.round_revise) or by inference after its deadline
(``overrides_infer_regret``); and a reviewer's confirmation that it stands.

Each takes the tenant's ledger lock first, then writes its rows and the events that record them in
one transaction, and recomputes the trust of the agents concerned (trust.scores.services)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config.api import ApiError, Conflict
from config.sql import rows_named
from ledger.jobs import Batch
from ledger.models import Agent, Event, Tenant
from ledger.services import SYSTEM_ACTOR, EventDraft, event_append, tenant_write_lock
from trust.rounds.models import OPEN_OVERRIDE, Override, Round
from trust.rounds.policies import note_check, occurred_at_check, texts_check
from trust.rounds.selectors import OVERRIDE_CONFIRMED, OVERRIDE_REVERT_WITHDRAWN
from trust.scores.scoring import text_hash
from trust.scores.services import trust_recompute


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
    texts_check(agent_output=agent_output, human_decision=human_decision)
    occurred = occurred_at_check(occurred_at, moment)
    # No savepoint: as in dissent_log.
    with transaction.atomic(savepoint=False):
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
        trust_recompute(
            tenant=agent.tenant,
            agent_ids=[agent.pk],
            reason="override_logged",
            now=moment,
            causes={
                agent.pk: {"override_ids": [override.pk], "by": decided_by, "round_id": round_id}
            },
            preceded_by=[
                EventDraft(
                    kind="override.logged",
                    actor=actor,
                    round_id=round_id,
                    payload=override_logged_payload(override),
                )
            ],
        )
    return override


def override_revert(
    *,
    override: Override,
    reverted_by: str,
    reason: str = Override.RevertReason.MARKED,
    note: str = "",
    actor: str,
    now: datetime | None = None,
) -> Override:
    """A person marks the override reverted (regret) at once, whatever its deadline, with an
    optional note saying why (kept on the row and in the ``override.reverted`` event)."""
    moment = now or timezone.now()
    note = note_check(note)
    with transaction.atomic():
        tenant_write_lock(override.tenant)
        marked = overrides_mark_reverted(
            tenant=override.tenant,
            override_ids=[override.pk],
            reverted_by=reverted_by,
            reason=reason,
            note=note,
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


def override_revert_withdraw(
    *, override: Override, note: str = "", actor: str, now: datetime | None = None
) -> Override:
    """Take a revert back: the override is open again (no regret), ``override.revert_withdrawn``
    records who and why, and the agent's trust is recomputed (reason
    ``override_revert_withdrawn``). The row is reopened, not confirmed: regret inference treats
    it like any open override, since the round's output is still the evidence it follows.
    Refuses an override that is not reverted (409 ``override_not_reverted``)."""
    moment = now or timezone.now()
    note = note_check(note)
    with transaction.atomic():
        tenant_write_lock(override.tenant)
        previous = (
            Override.objects.filter(pk=override.pk, reverted_at__isnull=False)
            .values("reverted_by", "revert_reason")
            .first()
        )
        if previous is None:
            raise Conflict(
                code="override_not_reverted",
                message="This override is not reverted, so there is no revert to withdraw.",
            )
        Override.objects.filter(pk=override.pk).update(**OPEN_OVERRIDE)
        trust_recompute(
            tenant=override.tenant,
            agent_ids=[override.agent_id],
            reason="override_revert_withdrawn",
            now=moment,
            causes={
                override.agent_id: {
                    "override_ids": [override.pk],
                    "by": actor,
                    "round_id": override.round_id,
                    "note": note,
                }
            },
            preceded_by=[
                EventDraft(
                    kind=OVERRIDE_REVERT_WITHDRAWN,
                    actor=actor,
                    round_id=override.round_id,
                    payload={
                        "override_id": override.pk,
                        "agent_id": override.agent_id,
                        "withdrawn_by": actor,
                        "was_reverted_by": previous["reverted_by"],
                        "was_reason": previous["revert_reason"],
                        "note": note,
                        "at": moment.isoformat(),
                    },
                )
            ],
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
            kind=OVERRIDE_CONFIRMED,
            actor=actor,
            round_id=override.round_id,
            payload={
                "override_id": override.pk,
                "agent_id": override.agent_id,
                "confirmed_by": actor,
                "at": moment.isoformat(),
            },
        )


CONFIRM_BATCH_MAX = 100


def overrides_confirm(
    *, tenant: Tenant, override_ids: Sequence[int], actor: str, now: datetime | None = None
) -> list[Event]:
    """Confirm several overrides at once (the review queue's bulk confirm): one
    ``override.confirmed`` event each, through ``override_confirm``, all in one transaction. An
    id the tenant has no override of (404 ``not_found``) or one already reverted (409
    ``override_already_reverted``) refuses the whole batch, so nothing is half-written."""
    ids = list(dict.fromkeys(override_ids))
    if not ids:
        raise ApiError(code="invalid_parameter", message="Tick the overrides to confirm first.")
    if len(ids) > CONFIRM_BATCH_MAX:
        raise ApiError(
            code="invalid_parameter",
            message=f"At most {CONFIRM_BATCH_MAX} overrides are confirmed at once.",
        )
    with transaction.atomic():
        tenant_write_lock(tenant)
        found = {o.pk: o for o in Override.objects.filter(tenant=tenant, pk__in=ids)}
        unknown = [pk for pk in ids if pk not in found]
        if unknown:
            raise ApiError(
                code="not_found",
                message=(
                    f"No override {', '.join(f'#{pk}' for pk in unknown)} in this tenant; "
                    "nothing was confirmed."
                ),
                status_code=404,
                details={"unknown": unknown},
            )
        reverted = [pk for pk in ids if found[pk].reverted_at is not None]
        if reverted:
            raise Conflict(
                code="override_already_reverted",
                message=(
                    f"Override {', '.join(f'#{pk}' for pk in reverted)} was already reverted; "
                    "nothing was confirmed."
                ),
                details={"reverted": reverted},
            )
        return [override_confirm(override=found[pk], actor=actor, now=now) for pk in ids]


CAUSE_IDS_MAX = 20


def overrides_mark_reverted(
    *,
    tenant: Tenant,
    override_ids: Sequence[int],
    reverted_by: str,
    reason: str,
    note: str = "",
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
            SET regret = true, reverted_by = %(by)s, reverted_at = %(now)s, revert_reason = %(why)s,
                revert_note = %(note)s
            WHERE tenant_id = %(tenant)s AND id = ANY(%(ids)s) AND reverted_at IS NULL
            RETURNING id, agent_id, round_id
            """,
            {
                "by": reverted_by,
                "now": now,
                "why": reason,
                "note": note,
                "tenant": tenant.pk,
                "ids": list(override_ids),
            },
        )
        rows = rows_named(cursor)
    return _after_revert(
        tenant=tenant,
        rows=rows,
        reverted_by=reverted_by,
        reason=reason,
        note=note,
        actor=actor,
        now=now,
    )


def _after_revert(
    *,
    tenant: Tenant,
    rows: Sequence[Any],
    reverted_by: str,
    reason: str,
    note: str = "",
    actor: str,
    now: datetime,
) -> list[int]:
    """Log and recompute for the overrides just marked: ``rows`` are their ``id``, ``agent_id``
    and ``round_id`` as the UPDATE returned them."""
    if not rows:
        return []
    ids = sorted(int(row.id) for row in rows)
    per_agent: dict[int, list[int]] = {}
    rounds: dict[int, set[str]] = {}
    for row in rows:
        per_agent.setdefault(int(row.agent_id), []).append(int(row.id))
        rounds.setdefault(int(row.agent_id), set()).add(row.round_id)
    event_append(
        tenant=tenant,
        kind="override.reverted",
        actor=actor,
        payload={
            "override_ids": ids,
            "reverted_by": reverted_by,
            "reason": reason,
            "note": note,
            "regret": True,
            "at": now.isoformat(),
        },
    )
    trust_recompute(
        tenant=tenant,
        agent_ids=sorted(per_agent),
        reason="override_regret",
        now=now,
        causes={
            agent_id: {
                # An inference batch can regret thousands of one agent's overrides: the first
                # few name them, the count says how many.
                "override_ids": sorted(override_ids)[:CAUSE_IDS_MAX],
                "count": len(override_ids),
                "by": reverted_by,
                "revert_reason": reason,
                "note": note,
                # The round, when the agent's overrides marked here share one (the agent page
                # links it); a batch across rounds names none.
                **(
                    {"round_id": next(iter(rounds[agent_id]))}
                    if len(rounds[agent_id]) == 1 and "" not in rounds[agent_id]
                    else {}
                ),
            }
            for agent_id, override_ids in per_agent.items()
        },
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
RETURNING o.id, o.agent_id, o.round_id
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
            tenant_ids = [int(row.tenant_id) for row in rows_named(cursor)]
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
                    rows = rows_named(cursor)
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


def overrides_infer_regret_batches() -> Iterator[Batch]:
    """The regret inference job (trust.tasks) as one batch: overrides_infer_regret already works
    tenant by tenant in committed batches until nothing is left, with its own batch size: each
    batch recomputes the touched agents' trust, so its batches are larger than JOB_BATCH_SIZE."""
    yield Batch(rows=overrides_infer_regret(), more=False)
