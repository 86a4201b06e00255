"""Reads of rounds, dissents and overrides: agents by name, the novelty search, an agent's evidence
and the review queue's overrides with their confirmations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import BigIntegerField, Q, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Left
from django.utils import timezone

from config.api import ApiError
from config.sql import row_named
from ledger.models import Agent, Event, Tenant
from memory.search.plans import cosine_similarity_sql, hnsw_scan_configure, vector_literal
from trust.rounds.models import Dissent, Override

# HNSW candidate list for the nearest earlier dissent, in strict order. bench/trust_bench.py
# (10,000 of the agent's dissents among 110,000) found it exactly for 200 of 200 dissents at 200
# and at 400 (9 ms), but missed one at 100 (by 0.59): 200 is the smallest exact list measured.
NOVELTY_EF_SEARCH = 200


def unknown_agents(names: Sequence[str]) -> ApiError:
    return ApiError(
        code="unknown_agent",
        message=f"No agent of this tenant is named {', '.join(names)}.",
        details={"unknown": list(names)},
    )


def agents_named(*, tenant: Tenant, names: Sequence[str]) -> dict[str, Agent]:
    """The tenant's agents by name; 400 ``unknown_agent`` listing the names that are none."""
    agents = {agent.name: agent for agent in Agent.objects.filter(tenant=tenant, name__in=names)}
    unknown = [name for name in names if name not in agents]
    if unknown:
        raise unknown_agents(unknown)
    return agents


# An agent with at most this many dissents is compared with each of them, without the HNSW
# index: the index is approximate, one graph over every agent's vectors, and it can miss an
# agent's only row (its neighbours dead or another agent's, the scan stopping at
# hnsw.max_scan_tuples), which read as "no earlier dissent", novelty 0. Reading 1,000 rows by
# the agent's index costs about what the index scan does.
NOVELTY_EXACT_MAX_DISSENTS = 1000

# One statement: the bounded read decides, and each branch's one-time gate keeps the other from
# running (as memory.search.legs.FILTERED_NEAREST does).
NOVELTY_SQL = """
WITH few AS MATERIALIZED (
    SELECT embedding FROM trust_dissentembedding
    WHERE tenant_id = %(tenant)s AND agent_id = %(agent)s
    LIMIT %(exact_max)s + 1
)
SELECT max(similarity) AS similarity FROM (
    SELECT {exact_similarity} AS similarity FROM few
    WHERE (SELECT count(*) FROM few) <= %(exact_max)s
    UNION ALL
    (SELECT {similarity} AS similarity FROM trust_dissentembedding
     WHERE tenant_id = %(tenant)s AND agent_id = %(agent)s
       AND (SELECT count(*) FROM few) > %(exact_max)s
     ORDER BY embedding <=> %(vector)s::vector
     LIMIT 1)
) AS nearest
"""


def dissent_max_similarity(*, agent: Agent, vector: Sequence[float]) -> float | None:
    """The highest cosine similarity of ``vector`` to the agent's earlier dissents, or None.

    Exact for an agent with up to ``NOVELTY_EXACT_MAX_DISSENTS``; past that the nearest comes
    from the HNSW index with iterative scans, so the agent filter cannot starve it however many
    other agents' dissents share the index.
    """
    # savepoint=False: see hnsw_scan_configure.
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        # Strict order: in relaxed order the first row of this agent that the index offers need
        # not be its nearest (bench/trust_bench.py found novelty off by up to 0.69 that way).
        hnsw_scan_configure(cursor, ef_search=NOVELTY_EF_SEARCH)
        cursor.execute(
            NOVELTY_SQL.format(
                exact_similarity=cosine_similarity_sql("few.embedding"),
                similarity=cosine_similarity_sql("embedding"),
            ),
            {
                "vector": vector_literal(vector),
                "tenant": agent.tenant_id,
                "agent": agent.pk,
                "exact_max": NOVELTY_EXACT_MAX_DISSENTS,
            },
        )
        row = row_named(cursor)
    return None if row is None or row.similarity is None else float(row.similarity)


def recent_dissents(*, agent: Agent, limit: int = 100) -> list[Dissent]:
    return list(Dissent.objects.filter(agent=agent).order_by("-occurred_at", "-id")[:limit])


def recent_overrides(*, agent: Agent, limit: int = 100) -> list[Override]:
    return list(Override.objects.filter(agent=agent).order_by("-occurred_at", "-id")[:limit])


def agent_dissents(*, agent: Agent) -> QuerySet[Dissent]:
    return Dissent.objects.filter(tenant_id=agent.tenant_id, agent=agent).order_by(
        "-occurred_at", "-id"
    )


OVERRIDE_HEAD_CHARS = 161  # the pages show 160 characters of an override's texts


def _with_heads(overrides: QuerySet[Override]) -> QuerySet[Override]:
    """The start of each override's texts (``agent_output_head``, ``human_decision_head``)
    instead of the whole texts, which may hold 20,000 characters each."""
    return overrides.defer("agent_output", "human_decision", "context").annotate(
        agent_output_head=Left("agent_output", OVERRIDE_HEAD_CHARS),
        human_decision_head=Left("human_decision", OVERRIDE_HEAD_CHARS),
    )


def agent_overrides(*, agent: Agent) -> QuerySet[Override]:
    return _with_heads(
        Override.objects.filter(tenant_id=agent.tenant_id, agent=agent).order_by(
            "-occurred_at", "-id"
        )
    )


def overrides_for_review(*, tenant: Tenant) -> QuerySet[Override]:
    """The tenant's overrides as the review queue's rows show them."""
    return _with_heads(Override.objects.filter(tenant=tenant).select_related("agent", "tenant"))


REVIEW_RECENT_DAYS = 7


OVERRIDE_CONFIRMED = "override.confirmed"
OVERRIDE_REVERT_WITHDRAWN = "override.revert_withdrawn"


def overrides_waiting(*, tenant: Tenant, now: datetime | None = None) -> QuerySet[Override]:
    """Open overrides whose regret check is still ahead, the nearest deadline first."""
    moment = now or timezone.now()
    return (
        overrides_for_review(tenant=tenant)
        .filter(reverted_at__isnull=True, auto_check_deadline__gt=moment)
        .order_by("auto_check_deadline", "id")
    )


def overrides_recent(
    *, tenant: Tenant, now: datetime | None = None, limit: int = 20
) -> list[Override]:
    """Overrides of the last REVIEW_RECENT_DAYS that are settled (reverted, or past their
    deadline), newest first."""
    moment = now or timezone.now()
    return list(
        overrides_for_review(tenant=tenant)
        .filter(occurred_at__gt=moment - timedelta(days=REVIEW_RECENT_DAYS))
        .filter(Q(reverted_at__isnull=False) | Q(auto_check_deadline__lte=moment))
        .order_by("-occurred_at", "-id")[:limit]
    )


@dataclass(frozen=True)
class Confirmation:
    by: str
    at: datetime


def override_confirmations(
    *, tenant: Tenant, override_ids: Sequence[int]
) -> dict[int, Confirmation]:
    """Who confirmed which of these overrides, read from their ``override.confirmed`` events
    (the latest confirmation of each wins). The ids are compared as text, the key of the
    ``event_override_confirmed`` index (ledger.models.Event)."""
    if not override_ids:
        return {}
    events = (
        Event.objects.filter(tenant=tenant, kind=OVERRIDE_CONFIRMED)
        .annotate(override_key=KT("payload__override_id"))
        .filter(override_key__in=[str(pk) for pk in override_ids])
        .order_by("seq")
        .values_list("payload", "actor", "created_at")
    )
    return {
        int(payload["override_id"]): Confirmation(by=actor, at=created_at)
        for payload, actor, created_at in events
    }


# --- The review flow: overrides by agent, decider, round and status, in a stable order ---------


class ReviewStatus:
    """Where an override stands for a reviewer. Waiting: open, nobody confirmed it, its regret
    check still ahead. Confirmed: open, and a reviewer said it stands. Regretted: reverted.
    Stands: open and unconfirmed, its deadline passed without a regret."""

    WAITING = "waiting"
    CONFIRMED = "confirmed"
    REGRETTED = "regretted"
    STANDS = "stands"
    ANY = "any"


@dataclass(frozen=True)
class OverrideFilters:
    agent_id: int | None = None
    decided_by: str = ""
    round_id: str = ""
    status: str = ReviewStatus.WAITING


# The waiting ones nearest deadline first (what needs a look soonest), the rest newest first;
# the id breaks ties, so the order is total and a page never skips or repeats a row.
WAITING_ORDER = ("auto_check_deadline", "id")
HISTORY_ORDER = ("-occurred_at", "-id")


def review_order(status: str) -> tuple[str, str]:
    return WAITING_ORDER if status == ReviewStatus.WAITING else HISTORY_ORDER


def _confirmed(tenant: Tenant) -> Q:
    """Overrides with an ``override.confirmed`` event. A NOT IN over them hashes the tenant's
    confirmations once (read through the ``event_override_confirmed`` index); NOT EXISTS probes
    the index per override instead, cheaper for the waiting few but twice the CPU when counting
    the thousands of settled ones (measured at 20,000 overrides, 5,000 confirmations)."""
    ids = (
        Event.objects.filter(tenant=tenant, kind=OVERRIDE_CONFIRMED)
        .annotate(override=Cast(KT("payload__override_id"), BigIntegerField()))
        # NOT IN over a list holding a NULL matches nothing: keep the list free of them.
        .filter(override__isnull=False)
        .values("override")
    )
    return Q(pk__in=ids)


def overrides_filtered(
    *, tenant: Tenant, filters: OverrideFilters, now: datetime | None = None
) -> QuerySet[Override]:
    """The tenant's overrides matching every filter given, in ``review_order``."""
    moment = now or timezone.now()
    overrides = overrides_for_review(tenant=tenant)
    if filters.agent_id is not None:
        overrides = overrides.filter(agent_id=filters.agent_id)
    if filters.decided_by:
        overrides = overrides.filter(decided_by=filters.decided_by)
    if filters.round_id:
        overrides = overrides.filter(round_id=filters.round_id)
    open_ = Q(reverted_at__isnull=True)
    confirmed = _confirmed(tenant)
    by_status = {
        ReviewStatus.WAITING: open_ & Q(auto_check_deadline__gt=moment) & ~confirmed,
        ReviewStatus.CONFIRMED: open_ & confirmed,
        ReviewStatus.REGRETTED: Q(reverted_at__isnull=False),
        ReviewStatus.STANDS: open_ & Q(auto_check_deadline__lte=moment) & ~confirmed,
    }
    if filters.status in by_status:
        overrides = overrides.filter(by_status[filters.status])
    return overrides.order_by(*review_order(filters.status))


def _beyond(override: Override, order: Sequence[str], forward: bool) -> Q:
    """The rows after ``override`` in ``order`` (before it when not ``forward``): a keyset
    condition on (first key, id), so it holds whether or not ``override`` still matches."""
    first, tie = order
    field = first.lstrip("-")
    ascending = (not first.startswith("-")) == forward
    step = "gt" if ascending else "lt"
    value = getattr(override, field)
    id_step = "gt" if (not tie.startswith("-")) == forward else "lt"
    return Q(**{f"{field}__{step}": value}) | Q(**{field: value, f"id__{id_step}": override.pk})


@dataclass(frozen=True)
class Neighbours:
    previous: int | None
    next: int | None
    position: int  # 1-based place of the override among the filter's rows; 0 if not among them
    total: int


def override_neighbours(
    *, tenant: Tenant, override: Override, filters: OverrideFilters, now: datetime | None = None
) -> Neighbours:
    """The overrides before and after ``override`` among those the filters match, its place
    and their count (four index reads, whatever the page)."""
    rows = overrides_filtered(tenant=tenant, filters=filters, now=now)
    order = review_order(filters.status)
    following = rows.filter(_beyond(override, order, forward=True)).values_list("id", flat=True)
    before = rows.filter(_beyond(override, order, forward=False))
    preceding = before.reverse().values_list("id", flat=True)
    total = rows.count()
    among = rows.filter(pk=override.pk).exists()
    return Neighbours(
        previous=preceding.first(),
        next=following.first(),
        position=before.count() + 1 if among else 0,
        total=total,
    )


def override_next_waiting(
    *, tenant: Tenant, after: Override, filters: OverrideFilters, now: datetime | None = None
) -> int | None:
    """The waiting override the flow moves on to after ``after`` was decided: the next one in
    deadline order among the filters' agent, decider and round, else the first one left."""
    waiting = overrides_filtered(
        tenant=tenant,
        filters=replace(filters, status=ReviewStatus.WAITING),
        now=now,
    ).exclude(pk=after.pk)
    ids = waiting.values_list("id", flat=True)
    return ids.filter(_beyond(after, WAITING_ORDER, forward=True)).first() or ids.first()


def override_for_detail(*, tenant: Tenant, pk: int) -> Override | None:
    """One override with its whole texts, or None when the tenant has no such override."""
    return Override.objects.filter(tenant=tenant, pk=pk).select_related("agent", "tenant").first()


def override_deciders(*, tenant: Tenant, limit: int = 200) -> list[str]:
    """Who decided the tenant's overrides (for the filter's suggestions), alphabetically."""
    return list(
        Override.objects.filter(tenant=tenant)
        .exclude(decided_by="")
        .order_by("decided_by")
        .values_list("decided_by", flat=True)
        .distinct()[:limit]
    )
