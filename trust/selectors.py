"""Reads of the trust app: the evidence behind scores, statistics, metrics, probation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import (
    Avg,
    Count,
    F,
    FloatField,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.functions import Cast, Coalesce, Left
from django.utils import timezone

from config.api import ApiError
from ledger.models import Agent, Event, Tenant
from memory.search.plans import cosine_similarity_sql, hnsw_scan_configure, vector_literal
from trust.models import (
    Dissent,
    GamingFlag,
    Override,
    RubricProposal,
    RubricVersion,
    TrustScoreChange,
)
from trust.scoring import PRIOR, TrustBreakdown, TrustEvidence, citation_entropy, trust_score

WINDOW_MIN_EVENTS = 5  # below this many events in the window, a ratio uses all history
DEPTH_WINDOW = 100  # avg_depth is over the agent's last 100 dissents
# HNSW candidate list for the nearest earlier dissent, in strict order. bench/trust_bench.py
# (10,000 of the agent's dissents among 110,000) found it exactly for 200 of 200 dissents at 200
# and at 400 (9 ms), but missed one at 100 (by 0.59): 200 is the smallest exact list measured.
NOVELTY_EF_SEARCH = 200

# One statement for any number of agents: the per-agent aggregates run on the
# (tenant, agent, occurred_at) indexes, so one agent costs one index range, and a bulk recompute
# of a tenant is one pass per table.
_EVIDENCE_SQL = """
SELECT a.id,
       d_recent.known, d_recent.impactful, d_all.known, d_all.impactful,
       depth.n, depth.total,
       o_recent.total, o_recent.regretted, o_all.total, o_all.regretted
FROM ledger_agent a
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE impact IS NOT NULL) AS known,
           count(*) FILTER (WHERE impact) AS impactful
    FROM trust_dissent
    WHERE tenant_id = a.tenant_id AND agent_id = a.id
      AND occurred_at > %(since)s AND occurred_at <= %(now)s
) d_recent ON true
LEFT JOIN LATERAL (
    -- All history is read only where the window holds too few events (a one-time filter).
    SELECT count(*) FILTER (WHERE impact IS NOT NULL) AS known,
           count(*) FILTER (WHERE impact) AS impactful
    FROM trust_dissent
    WHERE d_recent.known < %(min_events)s
      AND tenant_id = a.tenant_id AND agent_id = a.id AND occurred_at <= %(now)s
) d_all ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n, coalesce(sum(depth_score), 0) AS total
    FROM (
        SELECT depth_score FROM trust_dissent
        WHERE tenant_id = a.tenant_id AND agent_id = a.id AND occurred_at <= %(now)s
        ORDER BY occurred_at DESC, id DESC
        LIMIT %(depth_window)s
    ) recent
) depth ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS total, count(*) FILTER (WHERE regret) AS regretted
    FROM trust_override
    WHERE tenant_id = a.tenant_id AND agent_id = a.id
      AND occurred_at > %(since)s AND occurred_at <= %(now)s
) o_recent ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS total, count(*) FILTER (WHERE regret) AS regretted
    FROM trust_override
    WHERE o_recent.total < %(min_events)s
      AND tenant_id = a.tenant_id AND agent_id = a.id AND occurred_at <= %(now)s
) o_all ON true
WHERE a.tenant_id = %(tenant)s {agent_filter}
"""


def _windowed(
    recent_total: int, recent_hits: int, all_total: int, all_hits: int
) -> tuple[int, int, str]:
    """The window SPEC 8 asks for: the last 90 days, or all history when it holds fewer than 5
    (all-history counts are zero when the window is full: the SQL skips reading them)."""
    if recent_total >= WINDOW_MIN_EVENTS:
        return recent_total, recent_hits, f"{settings.TRUST_WINDOW_DAYS}d"
    if all_total == 0:
        return 0, 0, "none"
    return all_total, all_hits, "all"


def trust_evidence(
    *, tenant: Tenant, agent_ids: Sequence[int] | None = None, now: datetime | None = None
) -> dict[int, TrustEvidence]:
    """The evidence for each agent's score at ``now`` (all of the tenant's agents by default)."""
    moment = now or timezone.now()
    params: dict[str, Any] = {
        "tenant": tenant.pk,
        "now": moment,
        "since": moment - timedelta(days=settings.TRUST_WINDOW_DAYS),
        "depth_window": DEPTH_WINDOW,
        "min_events": WINDOW_MIN_EVENTS,
    }
    agent_filter = ""
    if agent_ids is not None:
        agent_filter = "AND a.id = ANY(%(agents)s)"
        params["agents"] = list(agent_ids)
    with connection.cursor() as cursor:
        cursor.execute(_EVIDENCE_SQL.format(agent_filter=agent_filter), params)
        rows = cursor.fetchall()
    evidence = {}
    for row in rows:
        agent_id, *counts = row
        known_recent, impactful_recent, known_all, impactful_all = (int(c) for c in counts[:4])
        depth_n, depth_total = int(counts[4]), float(counts[5])
        total_recent, regret_recent, total_all, regret_all = (int(c) for c in counts[6:])
        dissents_known, impactful, dissent_window = _windowed(
            known_recent, impactful_recent, known_all, impactful_all
        )
        overrides, regretted, override_window = _windowed(
            total_recent, regret_recent, total_all, regret_all
        )
        evidence[int(agent_id)] = TrustEvidence(
            dissents_known=dissents_known,
            dissents_impactful=impactful,
            dissents_window=dissent_window,
            depth_count=depth_n,
            depth_sum=depth_total,
            overrides=overrides,
            overrides_regretted=regretted,
            overrides_window=override_window,
        )
    return evidence


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


def dissent_max_similarity(*, agent: Agent, vector: Sequence[float]) -> float | None:
    """The highest cosine similarity of ``vector`` to the agent's earlier dissents, or None.

    The nearest neighbour comes from the HNSW index with iterative scans, so the agent filter
    cannot starve it however many other agents' dissents share the index.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        # Strict order: in relaxed order the first row of this agent that the index offers need
        # not be its nearest (bench/trust_bench.py found novelty off by up to 0.69 that way).
        hnsw_scan_configure(cursor, ef_search=NOVELTY_EF_SEARCH)
        cursor.execute(
            f"""
            SELECT {cosine_similarity_sql("embedding")}
            FROM trust_dissentembedding
            WHERE tenant_id = %(tenant)s AND agent_id = %(agent)s
            ORDER BY embedding <=> %(vector)s::vector
            LIMIT 1
            """,  # noqa: S608 (the f-string adds our own SQL, no input)
            {"vector": vector_literal(vector), "tenant": agent.tenant_id, "agent": agent.pk},
        )
        row = cursor.fetchone()
    return None if row is None or row[0] is None else float(row[0])


def agent_on_probation(*, agent: Agent, now: datetime | None = None) -> bool:
    """Probation: fewer than PROBATION_MIN_ROUNDS rounds, or ``probation_until`` still ahead."""
    moment = now or timezone.now()
    if agent.rounds_participated < settings.PROBATION_MIN_ROUNDS:
        return True
    return agent.probation_until is not None and agent.probation_until > moment


def rubric_current(*, tenant: Tenant) -> RubricVersion | None:
    return (
        RubricVersion.objects.filter(tenant=tenant)
        .prefetch_related("criteria")
        .order_by("-number")
        .first()
    )


def trust_history(*, agent: Agent) -> list[dict[str, Any]]:
    """Every change of the agent's score, oldest first, starting with its initial 0.6.

    The initial entry is the agent's registration unless an import brought its own history.
    """
    changes = [
        {"timestamp": c.at, "score": c.score, "reason": c.reason, "components": c.components}
        for c in TrustScoreChange.objects.filter(agent=agent).order_by("at", "id")
    ]
    if changes and changes[0]["reason"] == "initial":
        return changes
    initial = {"timestamp": agent.created_at, "score": PRIOR, "reason": "initial", "components": {}}
    return [initial, *changes]


@dataclass(frozen=True)
class LongTermStats:
    avg_dissent_depth_last_90d: float | None
    dissent_impact_ratio_last_90d: float | None
    total_overrides: int
    regret_rate_last_90d: float | None
    total_dissents: int


def long_term_stats(*, agent: Agent, now: datetime | None = None) -> LongTermStats:
    """SPEC 8's long-term statistics, always over the 90-day window (None when it is empty)."""
    moment = now or timezone.now()
    since = moment - timedelta(days=settings.TRUST_WINDOW_DAYS)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT
              (SELECT avg(depth_score) FROM trust_dissent
                WHERE agent_id = %(agent)s AND occurred_at > %(since)s AND occurred_at <= %(now)s),
              (SELECT avg(impact::int) FROM trust_dissent
                WHERE agent_id = %(agent)s AND impact IS NOT NULL
                  AND occurred_at > %(since)s AND occurred_at <= %(now)s),
              (SELECT count(*) FROM trust_override WHERE agent_id = %(agent)s),
              (SELECT avg(regret::int) FROM trust_override
                WHERE agent_id = %(agent)s AND occurred_at > %(since)s AND occurred_at <= %(now)s),
              (SELECT count(*) FROM trust_dissent WHERE agent_id = %(agent)s)
            """,
            {"agent": agent.pk, "since": since, "now": moment},
        )
        depth, impact, overrides, regret, dissents = cursor.fetchone()
    return LongTermStats(
        avg_dissent_depth_last_90d=None if depth is None else float(depth),
        dissent_impact_ratio_last_90d=None if impact is None else float(impact),
        total_overrides=int(overrides),
        regret_rate_last_90d=None if regret is None else float(regret),
        total_dissents=int(dissents),
    )


def recent_dissents(*, agent: Agent, limit: int = 100) -> list[Dissent]:
    return list(Dissent.objects.filter(agent=agent).order_by("-occurred_at", "-id")[:limit])


def recent_overrides(*, agent: Agent, limit: int = 100) -> list[Override]:
    return list(Override.objects.filter(agent=agent).order_by("-occurred_at", "-id")[:limit])


# --- Dashboards (trust/views.py) ---------------------------------------------------------------

OVERVIEW_SORTS: dict[str, tuple[Any, ...]] = {
    "name": ("name", "id"),
    "-name": ("-name", "-id"),
    "trust": ("trust_score", "name"),
    "-trust": ("-trust_score", "name"),
    "flags": ("open_flags", "name"),
    "-flags": ("-open_flags", "name"),
    "rounds": ("rounds_participated", "name"),
    "-rounds": ("-rounds_participated", "name"),
    # NULLS LAST either way: an agent without events in the window has no rate to rank.
    "impact": (F("impact_rate").asc(nulls_last=True), "name"),
    "-impact": (F("impact_rate").desc(nulls_last=True), "name"),
    "regret": (F("regret_rate").asc(nulls_last=True), "name"),
    "-regret": (F("regret_rate").desc(nulls_last=True), "name"),
}
SPARKLINE_POINTS = 20
CHART_POINTS = 500  # the newest changes drawn on an agent's chart; the export has them all
REVIEW_RECENT_DAYS = 7
OVERRIDE_CONFIRMED = "override.confirmed"


def _rate_over_window(model: type[Dissent] | type[Override], field: str, since: datetime) -> Any:
    """The share of the agent's rows in the window where ``field`` is true, as a subquery (None
    without rows; dissents of unknown impact do not count), on the (tenant, agent, time) index."""
    rows = model.objects.filter(
        tenant_id=OuterRef("tenant_id"), agent_id=OuterRef("pk"), occurred_at__gt=since
    )
    if model is Dissent:
        rows = rows.filter(impact__isnull=False)
    share = rows.order_by().values("agent_id").annotate(rate=Avg(Cast(field, IntegerField())))
    return Subquery(share.values("rate"), output_field=FloatField())


def trust_overview_agents(
    *,
    tenant: Tenant,
    search: str = "",
    probation: bool | None = None,
    flagged: bool | None = None,
    sort: str = "name",
    now: datetime | None = None,
) -> QuerySet[Agent]:
    """The tenant's agents for the trust overview, each with its open gaming flags and its
    dissent impact and regret rates over the last TRUST_WINDOW_DAYS, filtered and sorted."""
    moment = now or timezone.now()
    since = moment - timedelta(days=settings.TRUST_WINDOW_DAYS)
    open_flags = (
        GamingFlag.objects.filter(agent_id=OuterRef("pk"), status=GamingFlag.Status.OPEN)
        .order_by()
        .values("agent_id")
        .annotate(n=Count("id"))
        .values("n")
    )
    agents = Agent.objects.filter(tenant=tenant).annotate(
        open_flags=Coalesce(Subquery(open_flags, output_field=IntegerField()), 0),
        impact_rate=_rate_over_window(Dissent, "impact", since),
        regret_rate=_rate_over_window(Override, "regret", since),
    )
    if search:
        agents = agents.filter(Q(name__icontains=search) | Q(primary_role__icontains=search))
    on_probation = Q(rounds_participated__lt=settings.PROBATION_MIN_ROUNDS) | Q(
        probation_until__gt=moment
    )
    if probation is True:
        agents = agents.filter(on_probation)
    elif probation is False:
        agents = agents.exclude(on_probation)
    if flagged is True:
        agents = agents.filter(open_flags__gt=0)
    elif flagged is False:
        agents = agents.filter(open_flags=0)
    ordered: QuerySet[Agent] = agents.order_by(*OVERVIEW_SORTS.get(sort, OVERVIEW_SORTS["name"]))
    return ordered


def trust_sparklines(
    *, agent_ids: Sequence[int], points: int = SPARKLINE_POINTS
) -> dict[int, list[float]]:
    """The last ``points`` scores of each agent, oldest first, in one query for a whole page."""
    if not agent_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT agent_id, score FROM (
                SELECT agent_id, score, at, id,
                       row_number() OVER (PARTITION BY agent_id ORDER BY at DESC, id DESC) AS n
                FROM trust_trustscorechange WHERE agent_id = ANY(%(agents)s)
            ) recent
            WHERE n <= %(points)s
            ORDER BY agent_id, at, id
            """,
            {"agents": list(agent_ids), "points": points},
        )
        rows = cursor.fetchall()
    lines: dict[int, list[float]] = {int(agent_id): [] for agent_id in agent_ids}
    for agent_id, score in rows:
        lines[int(agent_id)].append(float(score))
    return lines


@dataclass(frozen=True)
class TrustPoint:
    at: datetime
    score: float
    reason: str
    previous: float | None

    @property
    def change(self) -> float | None:
        return None if self.previous is None else self.score - self.previous


def trust_chart(*, agent: Agent, limit: int = CHART_POINTS) -> list[TrustPoint]:
    """The agent's newest ``limit`` score changes, oldest first, each with the score before it;
    with the whole history in reach it starts at the initial 0.6, as trust_history does."""
    changes = list(
        TrustScoreChange.objects.filter(tenant_id=agent.tenant_id, agent=agent)
        .order_by("-at", "-id")
        .values_list("at", "score", "reason")[: limit + 1]
    )
    changes.reverse()
    points: list[TrustPoint] = []
    if len(changes) > limit:
        previous: float | None = changes[0][1]
        changes = changes[1:]
    elif changes and changes[0][2] == "initial":
        previous = None
    else:
        # Imported or backdated history may start before the agent's row was created.
        start = min([agent.created_at, *(at for at, _, _ in changes[:1])])
        points.append(TrustPoint(at=start, score=PRIOR, reason="initial", previous=None))
        previous = PRIOR
    for at, score, reason in changes:
        points.append(TrustPoint(at=at, score=score, reason=reason, previous=previous))
        previous = score
    return points


def agent_trust_breakdown(*, agent: Agent, now: datetime | None = None) -> TrustBreakdown:
    """The terms of the agent's current score, computed as trust_recompute computes them."""
    evidence = trust_evidence(tenant=agent.tenant, agent_ids=[agent.pk], now=now)
    return trust_score(evidence[agent.pk], prior_strength=settings.TRUST_PRIOR_STRENGTH)


@dataclass(frozen=True)
class CitationDiversity:
    dissents: int
    entropy_bits: float
    max_bits: float  # log2 of the criteria cited: the entropy of citing them all evenly
    counts: list[tuple[str, int]]  # most cited first
    top: int


def citation_diversity(*, agent: Agent, window: int = DEPTH_WINDOW) -> CitationDiversity:
    """Entropy and counts of the rubric criteria cited in the agent's last ``window`` dissents."""
    recent = list(
        Dissent.objects.filter(tenant_id=agent.tenant_id, agent=agent)
        .order_by("-occurred_at", "-id")
        .values_list("rubric_citations", flat=True)[:window]
    )
    entropy, counts = citation_entropy(recent)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return CitationDiversity(
        dissents=len(recent),
        entropy_bits=entropy,
        max_bits=math.log2(len(counts)) if len(counts) > 1 else 0.0,
        counts=ranked,
        top=ranked[0][1] if ranked else 0,
    )


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


def agent_gaming_flags(*, agent: Agent, limit: int = 10) -> list[GamingFlag]:
    return list(
        GamingFlag.objects.filter(tenant_id=agent.tenant_id, agent=agent).order_by("-id")[:limit]
    )


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
    (the latest confirmation of each wins)."""
    if not override_ids:
        return {}
    events = (
        Event.objects.filter(
            tenant=tenant, kind=OVERRIDE_CONFIRMED, payload__override_id__in=list(override_ids)
        )
        .order_by("seq")
        .values_list("payload", "actor", "created_at")
    )
    return {
        int(payload["override_id"]): Confirmation(by=actor, at=created_at)
        for payload, actor, created_at in events
    }


def gaming_flags_open(*, tenant: Tenant) -> list[GamingFlag]:
    return list(
        GamingFlag.objects.filter(tenant=tenant, status=GamingFlag.Status.OPEN)
        .select_related("agent")
        .order_by("created_at", "id")
    )


def rubric_proposals_pending(*, tenant: Tenant) -> list[RubricProposal]:
    return list(
        RubricProposal.objects.filter(tenant=tenant, status=RubricProposal.Status.PENDING)
        .select_related("override__agent")
        .order_by("created_at", "id")
    )
