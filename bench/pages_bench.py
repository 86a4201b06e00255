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

Each request is followed by a fixed baseline workload (bench/_pages.py): the page's p95 over the
baseline's median is printed beside the milliseconds, with the load average.

Uses its own embedded servers under var/bench-pages (deleted at the end unless --keep). Building
the data takes minutes (the million events' search index mostly); with --keep the next run finds
the tenant there and reuses it (and migrates it first):

    python bench/pages_bench.py --keep              # build once, keep
    python bench/pages_bench.py --keep --only token # reuse; only the token savings pages
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from _pages import load_average, page_time, pages_figures, pages_report
from _setup import ROOT, bench_print, bench_summary, django_setup, json_option_add, load_bar

WARM_UP = 3


def say(text: str) -> None:
    bench_print(f"[{time.strftime('%H:%M:%S')}] {text}")


EVENTS_SQL = """
INSERT INTO ledger_event (tenant_id, seq, run_id, round_id, turn, actor, kind, payload,
                          created_at, prev_hash, hash)
SELECT %(tenant)s, %(after)s + g, 'run_' || (g / 50), '', g %% 50, 'agent-' || (g %% 40),
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
    from memory.content.projection import content_savings_days_rebuild

    tenants = []
    # Each load is one INSERT ... SELECT: the bar counts them.
    bar = load_bar(total=4, description="load", unit="insert")
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
                EVENTS_SQL,
                {"tenant": tenant.pk, "after": 0, "start": start, "step": step, "events": size},
            )
        bar.update(1)
        say(f"{slug}: {size:,} events in {time.perf_counter() - started:.1f} s")
        for number in range(40):
            Agent.objects.get_or_create(tenant=tenant, name=f"agent-{number}")
        agent = Agent.objects.filter(tenant=tenant).order_by("pk")[0]
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(
                RESULTS_SQL, {"tenant": tenant.pk, "agent": agent.pk, "results": results}
            )
        # What action_result_record keeps up one result at a time, summed at once.
        content_savings_days_rebuild(tenant=tenant)
        bar.update(1)
        say(f"{slug}: {results:,} action results in {time.perf_counter() - started:.1f} s")
    bar.close()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ledger_event")
        cursor.execute("ANALYZE memory_contentitem")
        cursor.execute("ANALYZE memory_contentsavingsday")
    user, _ = get_user_model().objects.get_or_create(username="pages-bench")
    Membership.objects.get_or_create(tenant=tenants[0], user=user, defaults={"role": Role.REVIEWER})
    return tenants[0], user


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--results", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="Keep var/bench-pages afterwards; the next run reuses its data (minutes to build)",
    )
    parser.add_argument("--only", help="Only the pages whose name contains this")
    json_option_add(parser)
    args = parser.parse_args()
    with bench_summary(as_json=args.json, name="pages_bench") as summary:
        pages_measure(args, summary)


def pages_measure(args: argparse.Namespace, summary: dict[str, Any]) -> None:
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
        if args.only:
            pages = {name: url for name, url in pages.items() if args.only in name}
        print(f"\n{args.events:,} events and {args.results:,} action results in the tenant")
        load_before = load_average()
        timings = []
        for name, url in pages.items():
            headers = {"HX-Request": "true"} if "HTMX" in name else {}
            timings.append(
                page_time(client, name, url, runs=args.runs, warm_up=WARM_UP, headers=headers)
            )
            print(timings[-1].line(), flush=True)
        pages_report(timings, load_before=load_before)
        summary.update(pages_figures(timings))
    finally:
        embedded.postgres_stop(settings.EMBEDDED)
        embedded_redis.redis_stop(settings.EMBEDDED)
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)


def _day(days_ago: int) -> str:
    from django.utils import timezone

    return (timezone.now() - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M")


if __name__ == "__main__":
    main()
