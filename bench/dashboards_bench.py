#!/usr/bin/env python3
"""Trust dashboard benchmark (issue 8): server time and SQL queries of the trust pages.

    python bench/dashboards_bench.py          # 100 agents, 100,000 dissents, 20,000 overrides
    python bench/dashboards_bench.py --agents 20 --dissents 10000 --overrides 2000 --runs 20
    python bench/dashboards_bench.py --keep   # keep the data; the next --keep run reuses it

A tenant of ``--agents`` agents with ``--dissents`` dissents and ``--overrides`` overrides spread
over 180 days (loaded with binary COPY, as bench/trust_bench.py does), each agent with
``--changes`` trust score changes, some open gaming flags and pending rubric proposals, and a few
hundred overrides still waiting for their deadline. Then each page is requested ``--runs`` times
through Django's full stack in this process (middleware, session, view, selectors, template), as
an admin signed in with a session: the time is the server's, without the network. The SQL
queries of one request of each page are counted. Target: p95 <= 150 ms per page. The tenant's
ledger holds ``--events`` more events (1,000,000 by default, as bench/pages_bench.py makes them)
and ``--confirmations`` reviewers' ``override.confirmed`` events, which the review pages read, on
overrides spread over the whole set (most of the waiting ones stay unconfirmed).
Each request is followed by a fixed baseline workload and its CPU time is measured
(bench/_pages.py): p95 over the baseline's median and CPU p95 are printed beside the times.

Uses its own embedded servers under var/bench-dashboards (deleted at the end unless --keep; with
--keep the next run finds the tenant there and reuses it, migrated).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _pages import load_average, page_time, pages_figures, pages_report
from _setup import ROOT, bench_print, bench_summary, django_setup, json_option_add
from pages_bench import EVENTS_SQL

WARM_UP = 5
DAY = 86400
CRITERIA = ["Accuracy", "Completeness", "Evidence", "Safety", "Clarity", "Sourcing"]
REASONS = ["dissent_logged", "dissent_impact_true", "override_logged", "override_regret"]
PEOPLE = ["ana", "bo", "cy", "dee", "eli"]


def say(text: str) -> None:
    bench_print(f"[{time.strftime('%H:%M:%S')}] {text}")


def load(args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    """The tenant, its agents and their evidence; returns what the timed part needs."""
    from django.contrib.auth import get_user_model
    from memory_scale import raw_connection
    from trust_bench import (
        DISSENTS,
        OVERRIDES,
        Table,
        check_tables,
        copy_rows,
        ids_reserve,
        tenant_with_agents,
        vacuum_analyze,
    )

    from ledger.models import Role
    from ledger.services import membership_grant
    from trust.scores.scoring import text_hash

    changes_table = Table(
        "trust_trustscorechange",
        (
            ("tenant_id", "int8"),
            ("agent_id", "int8"),
            ("at", "timestamptz"),
            ("score", "float8"),
            ("reason", "varchar"),
            ("components", "jsonb"),
            ("cause", "jsonb"),
        ),
    )
    now = datetime.now(UTC)
    tenant, agents = tenant_with_agents("dash", [f"Agent{n:03d}" for n in range(args.agents)])
    agent_ids = [a.pk for a in agents]
    user = get_user_model().objects.create_user(username="bench-admin", password="x" * 20)
    membership_grant(tenant=tenant, user=user, role=Role.ADMIN)
    texts = [
        " ".join(rng.choice(["the", "claim", "source", "figure", "misses", "case", "risk"])
        for _ in range(rng.randint(8, 60)))
        for _ in range(500)
    ]  # fmt: skip
    conn = raw_connection()
    check_tables(conn)

    def at(age_seconds: float) -> datetime:
        return now - timedelta(seconds=age_seconds)

    first = ids_reserve(conn, DISSENTS, args.dissents)

    def dissents() -> Any:
        for i in range(args.dissents):
            age = rng.uniform(3600, 180 * DAY)
            known = rng.random() < 0.7
            impact = (rng.random() < 0.5) if known else None
            depth = rng.uniform(0.2, 1.8)
            cited = rng.sample(CRITERIA, rng.randint(0, 3))
            yield (
                first + i, tenant.pk, agent_ids[i % len(agent_ids)], f"r{i // 7}", at(age),
                at(age), {}, rng.choice(texts), cited, 1, min(depth, 1.0), 0.2 * len(cited),
                0.3, True, depth, impact, None, at(age - 3600) if known else None, False,
            )  # fmt: skip

    def overrides() -> Any:
        start = overrides_first
        for j in range(args.overrides):
            # The newest share is still waiting for its deadline (24 h after it was logged).
            age = rng.uniform(600, 20 * 3600) if j < args.waiting else rng.uniform(DAY, 180 * DAY)
            regret = j >= args.waiting and rng.random() < 0.15
            output, decision = rng.choice(texts), rng.choice(texts)
            yield (
                start + j, tenant.pk, agent_ids[j % len(agent_ids)], f"r{j}", at(age), at(age),
                {}, output, decision, text_hash(output), text_hash(decision),
                rng.choice(PEOPLE), regret, at(age - DAY), "system" if regret else "",
                at(age - DAY - 60) if regret else None, "inferred" if regret else "", "",
            )  # fmt: skip

    def changes() -> Any:
        for agent_id in agent_ids:
            score = 0.6
            for k in range(args.changes):
                score = min(max(score + rng.uniform(-0.03, 0.03), 0.05), 0.95)
                age = (args.changes - k) * (180 * DAY / args.changes)
                reason = rng.choice(REASONS)
                yield (tenant.pk, agent_id, at(age), score, reason, json.dumps({}),
                       cause(reason))  # fmt: skip

    def cause(reason: str) -> dict[str, Any]:
        # What the agent page links each change to (a dissent, or overrides and a reviewer).
        if reason.startswith("dissent"):
            return {"dissent_id": first + rng.randrange(args.dissents), "by": "system"}
        override = overrides_first + rng.randrange(args.overrides)
        return {"override_ids": [override], "round_id": f"r{override}", "by": rng.choice(PEOPLE)}

    say(f"COPY {args.dissents:,} dissents, {args.overrides:,} overrides, "
        f"{args.agents * args.changes:,} trust changes")  # fmt: skip
    started = time.perf_counter()
    overrides_first = ids_reserve(conn, OVERRIDES, args.overrides)
    copy_rows(conn, DISSENTS, dissents())
    copy_rows(conn, OVERRIDES, overrides())
    copy_rows(conn, changes_table, changes())
    conn.execute(
        """
        UPDATE ledger_agent a SET trust_score = c.score,
               rounds_participated = (a.id * 7) %% 12
        FROM (SELECT DISTINCT ON (agent_id) agent_id, score FROM trust_trustscorechange
              WHERE tenant_id = %s ORDER BY agent_id, at DESC) c
        WHERE a.id = c.agent_id
        """,
        [tenant.pk],
    )
    for agent_id in agent_ids[: args.flags]:
        conn.execute(
            "INSERT INTO trust_gamingflag (tenant_id, agent_id, created_at, entropy_bits,"
            " trust_score, dissents_considered, citation_counts, status, reviewed_by,"
            " review_note) VALUES (%s, %s, now(), 0.4, 0.8, 20, '{\"Accuracy\": 18}', 'open',"
            " '', '')",
            [tenant.pk, agent_id],
        )
    for n in range(args.proposals):
        conn.execute(
            "INSERT INTO trust_rubricproposal (tenant_id, proposed_by, proposer_trust,"
            " created_at, action, criterion, description, rationale, base_version, status,"
            " decided_by, decision_note) VALUES (%s, 'ana', 0.8, now(), 'add', %s, 'x', 'y', 1,"
            " 'pending', '', '')",
            [tenant.pk, f"Criterion{n}"],
        )
    vacuum_analyze(conn, DISSENTS, OVERRIDES, changes_table)
    conn.execute("VACUUM ANALYZE ledger_agent")
    say(f"loaded in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    after = conn.execute("SELECT max(seq) FROM ledger_event WHERE tenant_id = %s", [tenant.pk])
    last = after.fetchone()[0]
    conn.execute(
        EVENTS_SQL,
        {
            "tenant": tenant.pk,
            "after": last,
            "start": now - timedelta(days=180),
            "step": 180 * DAY / max(args.events, 1),
            "events": args.events,
        },
    )
    conn.execute(CONFIRMATIONS_SQL, [last + args.events, tenant.pk, args.confirmations])
    conn.execute("VACUUM ANALYZE ledger_event")
    conn.close()
    say(f"{args.events:,} events and {args.confirmations:,} confirmations in"
        f" {time.perf_counter() - started:.1f} s")  # fmt: skip
    return _timed_data(tenant)


# Reviewers' word that settled overrides stand, on a sample of the unregretted overrides spread
# over the whole set: ordered by a hash of the id (the same sample on every build), not by id,
# whose lowest are the newest, still waiting, so that the waiting list keeps most of its rows
# (5,000 of about 17,000: about 3 in 10 waiting ones confirmed). A confirmation is dated at the
# override's deadline, or now for one still waiting.
CONFIRMATIONS_SQL = """
INSERT INTO ledger_event (tenant_id, seq, run_id, round_id, turn, actor, kind, payload,
                          created_at, prev_hash, hash)
SELECT o.tenant_id, %s + row_number() OVER (ORDER BY o.id), '', '', 0, 'ana',
       'override.confirmed', jsonb_build_object('override_id', o.id),
       least(o.auto_check_deadline, now()), repeat('0', 64), md5(o.id::text)
FROM (SELECT id, tenant_id, auto_check_deadline FROM trust_override
      WHERE tenant_id = %s AND NOT regret ORDER BY md5('confirmed ' || id) LIMIT %s) AS o
"""


def _timed_data(tenant: Any) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from ledger.models import Agent
    from trust.rounds.selectors import OverrideFilters, overrides_filtered, overrides_waiting

    user = get_user_model().objects.get(username="bench-admin")
    busiest = Agent.objects.filter(tenant=tenant).order_by("pk").first()
    # The review flow's detail page opens on the override a reviewer meets first.
    waiting = overrides_waiting(tenant=tenant)
    first_waiting = waiting.values_list("pk", flat=True).first()
    # The waiting list a reviewer sees: waiting and not confirmed yet.
    unconfirmed = overrides_filtered(tenant=tenant, filters=OverrideFilters()).count()
    return {
        "user": user,
        "agent": busiest,
        "override_id": first_waiting,
        "waiting": (waiting.count(), unconfirmed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--dissents", type=int, default=100_000)
    parser.add_argument("--overrides", type=int, default=20_000)
    parser.add_argument("--waiting", type=int, default=300, help="overrides before deadline")
    parser.add_argument("--changes", type=int, default=200, help="trust changes per agent")
    parser.add_argument("--flags", type=int, default=5)
    parser.add_argument("--proposals", type=int, default=3)
    parser.add_argument("--events", type=int, default=1_000_000, help="more ledger events")
    parser.add_argument("--confirmations", type=int, default=5000, help="override.confirmed")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--only", help="only the pages whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep var/bench-dashboards")
    parser.add_argument("--profile", help="print a cProfile of one request of this path")
    json_option_add(parser)
    args = parser.parse_args()
    with bench_summary(as_json=args.json, name="dashboards_bench") as summary:
        dashboards_measure(args, summary)


def dashboards_measure(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    """Load (trust_bench's COPY, with its bars), then time each page; figures into summary."""
    data_dir = ROOT / "var" / "bench-dashboards"
    # The test client's host, and the pages' static files as production serves them (manifest).
    os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
    django_setup(data_dir)
    from django.core.management import call_command
    from django.test import Client

    from config import embedded, embedded_redis

    try:
        call_command("collectstatic", interactive=False, verbosity=0)
        from ledger.models import Tenant

        kept = Tenant.objects.filter(slug__startswith="dash-").first()
        data = _timed_data(kept) if kept else load(args, random.Random(8))
        client = Client()
        client.force_login(data["user"])
        agent = data["agent"]
        pages = [
            ("trust overview", "/trust/", {}),
            ("overview sorted by regret rate", "/trust/?sort=-regret", {}),
            ("overview table (HTMX, page 3)", "/trust/?page=3", {"HX-Request": "true"}),
            (f"agent page ({agent.name})", f"/trust/agents/{agent.pk}/", {}),
            ("review queue", "/trust/review/", {}),
            ("overrides (waiting)", "/trust/review/overrides/", {}),
            ("overrides (any status, page 50)", "/trust/review/overrides/?status=any&page=50", {}),
            # Open, unconfirmed and past the deadline: 20 rows of thousands.
            ("overrides (stood past deadline)", "/trust/review/overrides/?status=stands", {}),
            ("override detail (first waiting)",
             f"/trust/review/overrides/{data['override_id']}/", {}),
        ]  # fmt: skip
        if args.only:
            pages = [page for page in pages if args.only in page[0]]
        if args.profile:
            import cProfile
            import pstats

            client.get(args.profile)
            profiler = cProfile.Profile()
            profiler.runcall(client.get, args.profile)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
        print()
        load_before = load_average()
        timings = []
        for name, path, headers in pages:
            timings.append(
                page_time(client, name, path, runs=args.runs, warm_up=WARM_UP, headers=headers)
            )
            print(timings[-1].line(), flush=True)
            sql_ms, sql = max(timings[-1].queries)
            print(f"      slowest SQL {sql_ms:.1f} ms: {' '.join(sql.split())[:150]}")
        pages_report(timings, load_before=load_before)
        summary.update(pages_figures(timings))
        print(
            f"data: {args.agents} agents, {args.dissents:,} dissents, {args.overrides:,} overrides"
            f" ({data['waiting'][0]} waiting, {data['waiting'][1]} of them unconfirmed),"
            f" {args.agents * args.changes:,} trust changes,"
            f" {args.events:,} more events, {args.confirmations:,} confirmations"
            f"{' (kept from an earlier run)' if kept else ''};"
            f" {args.runs} runs per page after {WARM_UP} warm-up"
        )
    finally:
        from django.conf import settings

        embedded_redis.redis_stop(settings.EMBEDDED)
        embedded.postgres_stop(settings.EMBEDDED)
        if not args.keep:
            shutil.rmtree(Path(data_dir), ignore_errors=True)


if __name__ == "__main__":
    main()
