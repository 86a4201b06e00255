#!/usr/bin/env python3
"""Trust dashboard benchmark (issue 8): server time and SQL queries of the trust pages.

    python bench/dashboards_bench.py          # 100 agents, 100,000 dissents, 20,000 overrides
    python bench/dashboards_bench.py --agents 20 --dissents 10000 --overrides 2000 --runs 20

A tenant of ``--agents`` agents with ``--dissents`` dissents and ``--overrides`` overrides spread
over 180 days (loaded with binary COPY, as bench/trust_bench.py does), each agent with
``--changes`` trust score changes, some open gaming flags and pending rubric proposals, and a few
hundred overrides still waiting for their deadline. Then each page is requested ``--runs`` times
through Django's full stack in this process (middleware, session, view, selectors, template), as
an admin signed in with a session: the time is the server's, without the network. The SQL
queries of one request of each page are counted. Target: p95 <= 150 ms per page.

Uses its own embedded servers under var/bench-dashboards (deleted at the end unless --keep).
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

from _setup import ROOT, django_setup, percentile

TARGET_P95_MS = 150.0
WARM_UP = 5
DAY = 86400
CRITERIA = ["Accuracy", "Completeness", "Evidence", "Safety", "Clarity", "Sourcing"]
REASONS = ["dissent_logged", "dissent_impact_true", "override_logged", "override_regret"]
PEOPLE = ["ana", "bo", "cy", "dee", "eli"]


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


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

    from ledger.models import Agent, Role
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
        start = ids_reserve(conn, OVERRIDES, args.overrides)
        for j in range(args.overrides):
            # The newest share is still waiting for its deadline (24 h after it was logged).
            age = rng.uniform(600, 20 * 3600) if j < args.waiting else rng.uniform(DAY, 180 * DAY)
            regret = j >= args.waiting and rng.random() < 0.15
            output, decision = rng.choice(texts), rng.choice(texts)
            yield (
                start + j, tenant.pk, agent_ids[j % len(agent_ids)], f"r{j}", at(age), at(age),
                {}, output, decision, text_hash(output), text_hash(decision),
                rng.choice(PEOPLE), regret, at(age - DAY), "system" if regret else "",
                at(age - DAY - 60) if regret else None, "inferred" if regret else "",
            )  # fmt: skip

    def changes() -> Any:
        for agent_id in agent_ids:
            score = 0.6
            for k in range(args.changes):
                score = min(max(score + rng.uniform(-0.03, 0.03), 0.05), 0.95)
                age = (args.changes - k) * (180 * DAY / args.changes)
                yield (tenant.pk, agent_id, at(age), score, rng.choice(REASONS), json.dumps({}))

    say(f"COPY {args.dissents:,} dissents, {args.overrides:,} overrides, "
        f"{args.agents * args.changes:,} trust changes")  # fmt: skip
    started = time.perf_counter()
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
    conn.close()
    say(f"loaded in {time.perf_counter() - started:.1f} s")
    busiest = Agent.objects.get(pk=agent_ids[0])
    return {"user": user, "agent": busiest}


def measure(
    client: Any, path: str, runs: int, headers: dict[str, str]
) -> tuple[list[float], list[tuple[float, str]]]:
    from django.db import connection

    for _ in range(WARM_UP):
        assert client.get(path, **headers).status_code == 200, path
    queries: list[tuple[float, str]] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            queries.append(((time.perf_counter() - started) * 1000, sql))

    with connection.execute_wrapper(count):
        client.get(path, **headers)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(path, **headers)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, path
    return times, queries


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
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="keep var/bench-dashboards")
    parser.add_argument("--profile", help="print a cProfile of one request of this path")
    args = parser.parse_args()

    data_dir = ROOT / "var" / "bench-dashboards"
    # The test client's host, and the pages' static files as production serves them (manifest).
    os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
    django_setup(data_dir)
    from django.core.management import call_command
    from django.test import Client

    from config import embedded, embedded_redis

    try:
        call_command("collectstatic", interactive=False, verbosity=0)
        data = load(args, random.Random(8))
        client = Client()
        client.force_login(data["user"])
        agent = data["agent"]
        pages = [
            ("trust overview", "/trust/", {}),
            ("overview sorted by regret rate", "/trust/?sort=-regret", {}),
            ("overview table (HTMX, page 3)", "/trust/?page=3", {"HTTP_HX_REQUEST": "true"}),
            (f"agent page ({agent.name})", f"/trust/agents/{agent.pk}/", {}),
            ("review queue", "/trust/review/", {}),
        ]  # fmt: skip
        if args.profile:
            import cProfile
            import pstats

            client.get(args.profile)
            profiler = cProfile.Profile()
            profiler.runcall(client.get, args.profile)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
        print()
        print(f"load average before timing: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        results = []
        for name, path, headers in pages:
            times, timed = measure(client, path, args.runs, headers)
            queries = len(timed)
            p50, p95 = percentile(times, 0.5), percentile(times, 0.95)
            met = "met" if p95 <= TARGET_P95_MS else "NOT met"
            results.append(
                f"  {name:44s} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  max {max(times):7.1f} ms"
                f"  {queries:2d} SQL queries  (target p95 <= {TARGET_P95_MS:.0f} ms: {met})"
            )
            print(results[-1], flush=True)
            sql_ms = sum(ms for ms, _ in timed)
            slowest = max(timed)
            print(
                f"      SQL {sql_ms:.1f} ms of one request; slowest {slowest[0]:.1f} ms:"
                f" {' '.join(slowest[1].split())[:160]}"
            )
        print(f"load average after timing: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(
            f"data: {args.agents} agents, {args.dissents:,} dissents, {args.overrides:,} overrides"
            f" ({args.waiting} waiting), {args.agents * args.changes:,} trust changes;"
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
