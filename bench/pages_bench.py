#!/usr/bin/env python3
"""Memory and ledger pages benchmark (issue 8): server time and SQL queries of the ledger
browser, the token savings page and the jobs page at realistic volumes.

    python bench/pages_bench.py                     # 1,000,000 events, 100,000 action results
    python bench/pages_bench.py --events 200000 --results 20000 --runs 20

One tenant's ledger of ``--events`` events (inserted set-based with ``INSERT ... SELECT
generate_series``: the browser reads rows, it does not check hashes, so the hashes are
placeholders) over 30 days, 40 actors, 60 kinds and 20,000 runs, next to a second tenant a tenth its
size; ``--results`` content-store action results over 5,000 runs of the last 30 days. Each
page is requested ``--runs`` times through Django's full stack in this process (middleware,
session, view, selectors, template) by a signed-in reviewer: the time is the server's, without
the network. Target: p95 <= 150 ms per page.

Uses its own embedded servers under var/bench-pages (deleted at the end unless --keep).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from _setup import ROOT, django_setup, percentile

TARGET_P95_MS = 150.0
WARM_UP = 3


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


EVENTS_SQL = """
INSERT INTO ledger_event (tenant_id, seq, run_id, round_id, turn, actor, kind, payload,
                          created_at, prev_hash, hash)
SELECT %(tenant)s, g, 'run_' || (g / 50), '', g %% 50, 'agent-' || (g %% 40),
       'kind.' || (g %% 60),
       jsonb_build_object('text', 'observation number ' || g, 'value', g * 0.5),
       %(start)s::timestamptz + (g * %(step)s) * interval '1 second',
       repeat('0', 64), md5(g::text) || md5((g + 1)::text)
FROM generate_series(1, %(events)s) AS g
"""

RESULTS_SQL = """
INSERT INTO memory_contentitem (tenant_id, key, agent_id, scope, run_id, item_type, format, body,
    content_hash, size, source, tags, related_to, action_type, rendering, compactor,
    tokens_full, tokens_returned, timestamp, created_at)
SELECT %(tenant)s, 'k' || g, %(agent)s, 'run', 'run_' || (g %% 5000), 'action_result', 'text',
       '', md5(g::text), 1000, '', '{}', '{}', 'sql.query',
       CASE WHEN g %% 3 = 0 THEN 'full' ELSE 'compacted' END, '',
       800 + g %% 400, CASE WHEN g %% 3 = 0 THEN 800 + g %% 400 ELSE 60 + g %% 40 END,
       now() - (g %% 30) * interval '1 day', now()
FROM generate_series(1, %(results)s) AS g
"""


def load(*, events: int, results: int) -> tuple[Any, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from ledger.models import Agent, Membership, Role, Tenant

    tenants = []
    # A second tenant, a tenth the size, so every query has another tenant's rows to skip.
    for slug, size in (("pages-bench", events), ("pages-bench-other", events // 10)):
        tenant, created = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug})
        tenants.append(tenant)
        if not created:
            continue
        start = timezone.now() - timedelta(days=30)
        step = 30 * 86400 / size
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(
                EVENTS_SQL, {"tenant": tenant.pk, "start": start, "step": step, "events": size}
            )
        say(f"{slug}: {size:,} events in {time.perf_counter() - started:.1f} s")
        for number in range(40):
            Agent.objects.get_or_create(tenant=tenant, name=f"agent-{number}")
        agent = Agent.objects.filter(tenant=tenant).order_by("pk")[0]
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(
                RESULTS_SQL, {"tenant": tenant.pk, "agent": agent.pk, "results": results}
            )
        say(f"{slug}: {results:,} action results in {time.perf_counter() - started:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ledger_event")
        cursor.execute("ANALYZE memory_contentitem")
    user, _ = get_user_model().objects.get_or_create(username="pages-bench")
    Membership.objects.get_or_create(tenant=tenants[0], user=user, defaults={"role": Role.REVIEWER})
    return tenants[0], user


def measure(
    client: Any, url: str, runs: int, headers: dict[str, str]
) -> tuple[list[float], int, float]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(WARM_UP):
        assert client.get(url, headers=headers).status_code == 200, url
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(url, headers=headers)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, url
    with CaptureQueriesContext(connection) as captured:
        client.get(url, headers=headers)
    sql_ms = sum(float(query["time"]) for query in captured.captured_queries) * 1000
    return timings, len(captured.captured_queries), sql_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--results", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="Keep var/bench-pages afterwards")
    args = parser.parse_args()
    data_dir = Path(os.environ.get("AGENT_MEMORY_DATA_DIR", ROOT / "var" / "bench-pages"))
    django_setup(data_dir)
    from django.conf import settings
    from django.core.management import call_command
    from django.test import Client

    from config import embedded, embedded_redis

    settings.ALLOWED_HOSTS = ["*"]
    try:
        # The pages link hashed static files, as in production.
        call_command("collectstatic", interactive=False, verbosity=0)
        _, user = load(events=args.events, results=args.results)
        client = Client()
        client.force_login(user)
        middle = args.events // 2
        pages = {
            "ledger, newest page": "/ledger/",
            "ledger, a page deep in the chain (cursor halfway)": f"/ledger/?before_seq={middle}",
            "ledger, one kind": "/ledger/?kind=kind.7",
            "ledger, one actor and kind": "/ledger/?actor=agent-3&kind=kind.3",
            "ledger, one run": f"/ledger/?run=run_{middle // 50}",
            "ledger, a time window (2 days, 10 days ago)": (
                "/ledger/?since=" + _day(10) + "&before=" + _day(8)
            ),
            "ledger, load more (HTMX rows)": f"/ledger/?kind=kind.7&before_seq={middle}",
            "token savings, last 30 days": "/memory/token-savings/",
            "token savings, all time": "/memory/token-savings/?period=all",
            "jobs": "/jobs/",
        }
        print(f"\n{args.events:,} events and {args.results:,} action results in the tenant")
        worst = 0.0
        for name, url in pages.items():
            headers = {"HX-Request": "true"} if "HTMX" in name else {}
            timings, queries, sql_ms = measure(client, url, args.runs, headers)
            p95 = percentile(timings, 0.95)
            worst = max(worst, p95)
            print(
                f"  {name:<55} p50 {percentile(timings, 0.5):7.1f} ms  p95 {p95:7.1f} ms  "
                f"{queries:2d} queries ({sql_ms:.1f} ms of SQL in one request)"
            )
        verdict = "met" if worst <= TARGET_P95_MS else "NOT met"
        print(f"\nslowest p95 {worst:.1f} ms; target p95 <= {TARGET_P95_MS:.0f} ms: {verdict}")
    finally:
        if not args.keep:
            embedded.postgres_stop(settings.EMBEDDED)
            embedded_redis.redis_stop(settings.EMBEDDED)
            shutil.rmtree(data_dir, ignore_errors=True)


def _day(days_ago: int) -> str:
    from django.utils import timezone

    return (timezone.now() - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M")


if __name__ == "__main__":
    main()
