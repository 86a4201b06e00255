"""Reads of trust scores: the evidence behind a score and its terms, probation, the history and
long-term statistics, what the trust endpoints answer, and the overview's and agent page's
sparklines, chart and citation diversity."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
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
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from config.sql import row_named, rows_named
from ledger.models import Agent, Tenant
from trust.governance.models import GamingFlag
from trust.rounds.models import Dissent, Override
from trust.rounds.selectors import recent_dissents, recent_overrides
from trust.scores.models import TrustScoreChange
from trust.scores.scoring import PRIOR, TrustBreakdown, TrustEvidence, citation_entropy, trust_score

WINDOW_MIN_EVENTS = 5  # below this many events in the window, a ratio uses all history


DEPTH_WINDOW = 100  # avg_depth is over the agent's last 100 dissents


# One statement for any number of agents: the per-agent aggregates run on the
# (tenant, agent, occurred_at) indexes, so one agent costs one index range, and a bulk recompute
# of a tenant is one pass per table.
_EVIDENCE_SQL = """
SELECT a.id AS agent_id,
       d_recent.known AS known_recent, d_recent.impactful AS impactful_recent,
       d_all.known AS known_all, d_all.impactful AS impactful_all,
       depth.n AS depth_n, depth.total AS depth_total,
       o_recent.total AS overrides_recent, o_recent.regretted AS regretted_recent,
       o_all.total AS overrides_all, o_all.regretted AS regretted_all
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
        rows = rows_named(cursor)
    evidence = {}
    for row in rows:
        dissents_known, impactful, dissent_window = _windowed(
            int(row.known_recent),
            int(row.impactful_recent),
            int(row.known_all),
            int(row.impactful_all),
        )
        overrides, regretted, override_window = _windowed(
            int(row.overrides_recent),
            int(row.regretted_recent),
            int(row.overrides_all),
            int(row.regretted_all),
        )
        evidence[int(row.agent_id)] = TrustEvidence(
            dissents_known=dissents_known,
            dissents_impactful=impactful,
            dissents_window=dissent_window,
            depth_count=int(row.depth_n),
            depth_sum=float(row.depth_total),
            overrides=overrides,
            overrides_regretted=regretted,
            overrides_window=override_window,
        )
    return evidence


@dataclass(frozen=True)
class RegretPreview:
    current: float  # the agent's score as stored now
    if_regretted: float  # what marking the override regretted would make it


def trust_if_regretted(
    *,
    tenant: Tenant,
    overrides: Sequence[tuple[int, int, datetime]],
    now: datetime | None = None,
) -> dict[int, RegretPreview]:
    """What marking each open override regretted would make its agent's trust: the evidence at
    ``now`` with one more regret where the override counts in the window the score uses, run
    through the pure formula (no write). ``overrides`` are (override id, agent id, occurred_at);
    one evidence query for all their agents. The recompute a revert runs gives the same number.
    """
    moment = now or timezone.now()
    agent_ids = sorted({agent_id for _, agent_id, _ in overrides})
    if not agent_ids:
        return {}
    evidence = trust_evidence(tenant=tenant, agent_ids=agent_ids, now=moment)
    stored = dict(
        Agent.objects.filter(tenant=tenant, pk__in=agent_ids).values_list("pk", "trust_score")
    )
    since = moment - timedelta(days=settings.TRUST_WINDOW_DAYS)
    previews: dict[int, RegretPreview] = {}
    for override_id, agent_id, occurred_at in overrides:
        held = evidence.get(agent_id)
        if held is None:
            continue
        # A 90-day window leaves older overrides out; all history (too few recent) counts all.
        counted = held.overrides_window == "all" or (
            held.overrides_window != "none" and since < occurred_at <= moment
        )
        if counted:
            held = replace(held, overrides_regretted=held.overrides_regretted + 1)
        previews[override_id] = RegretPreview(
            current=round(stored[agent_id], 6),
            if_regretted=trust_score(held, prior_strength=settings.TRUST_PRIOR_STRENGTH).score,
        )
    return previews


def agent_on_probation(*, agent: Agent, now: datetime | None = None) -> bool:
    """Probation: fewer than PROBATION_MIN_ROUNDS rounds, or ``probation_until`` still ahead."""
    moment = now or timezone.now()
    if agent.rounds_participated < settings.PROBATION_MIN_ROUNDS:
        return True
    return agent.probation_until is not None and agent.probation_until > moment


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
                WHERE agent_id = %(agent)s AND occurred_at > %(since)s AND occurred_at <= %(now)s)
                AS depth,
              (SELECT avg(impact::int) FROM trust_dissent
                WHERE agent_id = %(agent)s AND impact IS NOT NULL
                  AND occurred_at > %(since)s AND occurred_at <= %(now)s) AS impact,
              (SELECT count(*) FROM trust_override WHERE agent_id = %(agent)s) AS overrides,
              (SELECT avg(regret::int) FROM trust_override
                WHERE agent_id = %(agent)s AND occurred_at > %(since)s AND occurred_at <= %(now)s)
                AS regret,
              (SELECT count(*) FROM trust_dissent WHERE agent_id = %(agent)s) AS dissents
            """,
            {"agent": agent.pk, "since": since, "now": moment},
        )
        row = row_named(cursor)
    assert row is not None  # a SELECT without FROM answers one row
    return LongTermStats(
        avg_dissent_depth_last_90d=None if row.depth is None else float(row.depth),
        dissent_impact_ratio_last_90d=None if row.impact is None else float(row.impact),
        total_overrides=int(row.overrides),
        regret_rate_last_90d=None if row.regret is None else float(row.regret),
        total_dissents=int(row.dissents),
    )


def agent_trust_breakdown(*, agent: Agent, now: datetime | None = None) -> TrustBreakdown:
    """The terms of the agent's current score, computed as trust_recompute computes them."""
    evidence = trust_evidence(tenant=agent.tenant, agent_ids=[agent.pk], now=now)
    return trust_score(evidence[agent.pk], prior_strength=settings.TRUST_PRIOR_STRENGTH)


def agent_trust_summary(*, agent: Agent) -> dict[str, Any]:
    """The agent as the trust endpoints list it: score, probation and evidence counts (the counts
    are the ``dissent_count``/``override_count`` annotations of trust.scores.api's query)."""
    return {
        "id": agent.pk,
        "name": agent.name,
        "trust_score": agent.trust_score,
        "rounds_participated": agent.rounds_participated,
        "probation_until": agent.probation_until,
        "on_probation": agent_on_probation(agent=agent),
        "dissents": getattr(agent, "dissent_count", 0),
        "overrides": getattr(agent, "override_count", 0),
    }


def agent_trust_detail(*, agent: Agent, now: datetime | None = None) -> dict[str, Any]:
    """One agent's trust as ``GET /trust/{id}/`` answers it: the summary, the terms of the score
    computed now (as trust_recompute computes them), history, statistics and recent evidence."""
    moment = now or timezone.now()
    return {
        **agent_trust_summary(agent=agent),
        "components": agent_trust_breakdown(agent=agent, now=moment).as_dict(),
        "history": trust_history(agent=agent),
        "long_term_stats": long_term_stats(agent=agent, now=moment),
        "recent_dissents": recent_dissents(agent=agent),
        "recent_overrides": recent_overrides(agent=agent),
    }


# --- Dashboards (trust.pages) ------------------------------------------------------------------


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
        rows = rows_named(cursor)
    lines: dict[int, list[float]] = {int(agent_id): [] for agent_id in agent_ids}
    for row in rows:
        lines[int(row.agent_id)].append(float(row.score))
    return lines


@dataclass(frozen=True)
class TrustPoint:
    at: datetime
    score: float
    reason: str
    previous: float | None
    cause: dict[str, Any] = field(default_factory=dict)

    @property
    def change(self) -> float | None:
        return None if self.previous is None else self.score - self.previous

    @property
    def override_ids(self) -> list[int]:
        return [int(i) for i in self.cause.get("override_ids", [])]

    @property
    def more_overrides(self) -> int:
        """How many overrides of the cause its ids leave unnamed (an inference batch)."""
        return max(int(self.cause.get("count", 0)) - len(self.override_ids), 0)


def trust_chart(*, agent: Agent, limit: int = CHART_POINTS) -> list[TrustPoint]:
    """The agent's newest ``limit`` score changes, oldest first, each with the score before it;
    with the whole history in reach it starts at the initial 0.6, as trust_history does."""
    changes = list(
        TrustScoreChange.objects.filter(tenant_id=agent.tenant_id, agent=agent)
        .order_by("-at", "-id")
        .values_list("at", "score", "reason", "cause")[: limit + 1]
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
        start = min([agent.created_at, *(change[0] for change in changes[:1])])
        points.append(TrustPoint(at=start, score=PRIOR, reason="initial", previous=None))
        previous = PRIOR
    for at, score, reason, cause in changes:
        points.append(
            TrustPoint(at=at, score=score, reason=reason, previous=previous, cause=cause or {})
        )
        previous = score
    return points


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
