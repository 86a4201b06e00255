"""Ledger benchmarks (issue 3): append throughput, chain verification, salience recall.

    python bench/ledger_bench.py                      # all three, full size
    python bench/ledger_bench.py --verify-events 100000 --skip-append

Targets: append >= 5,000 events/s in batches of 1,000; verify a 1,000,000-event chain in <= 20 s
with flat memory; salience recall over a 10,000-event run with p95 <= 30 ms.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
import uuid
from typing import Any

from _setup import (
    bench_summary,
    describe,
    django_setup,
    json_option_add,
    load_bar,
    percentile,
)


def bench_append(batches: int, batch_size: int, summary: dict[str, Any]) -> None:
    from ledger.services import EventDraft, events_append, tenant_create

    tenant = tenant_create(name="bench append", slug=f"bench-append-{uuid.uuid4().hex[:8]}")
    drafts = [
        EventDraft(
            kind="agent.spoke",
            actor="system",
            run_id="run_bench",
            turn=i,
            payload={"text": f"Agent line number {i} about the quarterly report", "n": i},
        )
        for i in range(batch_size)
    ]
    events_append(tenant=tenant, drafts=drafts)  # warm-up
    timings = []
    for _ in range(batches):
        started = time.perf_counter()
        events_append(tenant=tenant, drafts=drafts)
        timings.append(time.perf_counter() - started)
    rates = sorted(batch_size / t for t in timings)
    summary["append_events_per_s"] = {"median": statistics.median(rates), "target": 5000}
    print(
        f"append: {batches} batches of {batch_size}: median {rates[len(rates) // 2]:,.0f} events/s "
        f"(min {rates[0]:,.0f}, max {rates[-1]:,.0f}); target >= 5,000"
    )


def _fill_chain(total: int) -> object:
    from ledger.services import EventDraft, events_append, tenant_create

    tenant = tenant_create(name="bench verify", slug=f"bench-verify-{uuid.uuid4().hex[:8]}")
    batch = 5000
    started = time.perf_counter()
    bar = load_bar(total=total - 1, description="chain", unit="event")
    for offset in range(1, total, batch):
        count = min(batch, total - offset)
        events_append(
            tenant=tenant,
            drafts=[
                EventDraft(
                    kind="world.observed",
                    actor="system",
                    run_id=f"run_{(offset + i) // 1000}",
                    turn=(offset + i) % 1000,
                    payload={"text": f"observation {offset + i}", "value": (offset + i) * 0.5},
                )
                for i in range(count)
            ],
        )
        bar.update(count)
    bar.close()
    print(f"verify: built a {total:,}-event chain in {time.perf_counter() - started:.1f} s")
    return tenant


def bench_verify(total: int, summary: dict[str, Any]) -> None:
    from ledger.selectors import event_chain_verify

    tenant = _fill_chain(total)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    report = event_chain_verify(tenant=tenant)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    summary["verify"] = {
        "events": report.events_checked,
        "seconds": elapsed,
        "ok": report.ok,
        "peak_rss_growth_mib": (rss_after - rss_before) / 1024,
        "target_seconds": 20,
    }
    print(
        f"verify: {report.events_checked:,} events in {elapsed:.1f} s "
        f"({report.events_checked / elapsed:,.0f} events/s), ok={report.ok}; "
        f"peak RSS grew by {(rss_after - rss_before) / 1024:.0f} MiB during verify; target <= 20 s"
    )


def bench_salience(run_events: int, queries: int, *, index: bool, summary: dict[str, Any]) -> None:
    from django.db import connection

    from ledger.models import Event
    from ledger.services import EventDraft, agent_create, events_append, tenant_create
    from memory.embeddings.services import event_embeddings_build
    from memory.recall.selectors import recall_salience

    tenant = tenant_create(name="bench recall", slug=f"bench-recall-{uuid.uuid4().hex[:8]}")
    agent = agent_create(tenant=tenant, name="Creator1", actor="system")
    kinds = ["world.observed", "agent.spoke", "judge.verdict", "clue.found", "agent.thought"]
    words = [
        "key",
        "butler",
        "garden",
        "knife",
        "letter",
        "alibi",
        "storm",
        "window",
        "cellar",
        "ledger",
        "candle",
        "map",
    ]
    bar = load_bar(total=run_events, description="run", unit="event")
    for offset in range(0, run_events, 1000):
        events_append(
            tenant=tenant,
            drafts=[
                EventDraft(
                    kind=kinds[i % len(kinds)],
                    actor="Creator1" if i % 3 == 0 else "system",
                    run_id="run_long",
                    turn=(offset + i) // 4,
                    payload={
                        "text": f"turn {offset + i}: the {words[i % 12]} near the "
                        f"{words[(i * 7) % 12]} and the {words[(i * 5) % 12]}"
                    },
                )
                for i in range(min(1000, run_events - offset))
            ],
        )
        bar.update(min(1000, run_events - offset))
    bar.close()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ledger_event")  # as autovacuum would after a bulk load
    if index:
        started = time.perf_counter()
        ids = list(Event.objects.filter(tenant=tenant).values_list("pk", flat=True))
        event_embeddings_build(event_ids=ids)
        print(f"salience: embedded {len(ids):,} events in {time.perf_counter() - started:.1f} s")
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE memory_eventembedding")
    timings = []
    for number in range(queries + 5):
        query = f"{words[number % 12]} {words[(number * 3) % 12]}"
        started = time.perf_counter()
        result = recall_salience(agent=agent, run_id="run_long", query=query)
        if number >= 5:  # the first few warm caches and the embedder
            timings.append((time.perf_counter() - started) * 1000)
    summary["salience_recall_ms"] = {
        "events": run_events,
        "semantic": result.semantic,
        "indexed": index,
        "p50": statistics.median(timings),
        "p95": percentile(timings, 0.95),
        "target_p95": 30,
    }
    print(
        f"salience recall over a {run_events:,}-event run (semantic={result.semantic}, "
        f"indexed={index}): "
        f"{describe(timings)}; target p95 <= 30 ms"
    )
    if result.semantic:
        from memory.embeddings.backends import embed_query

        embedding = []
        for number in range(queries):
            started = time.perf_counter()
            embed_query(f"{words[number % 12]} {words[(number * 3) % 12]}")
            embedding.append((time.perf_counter() - started) * 1000)
        print(f"  of which embedding the query alone: {describe(embedding)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--append-batches", type=int, default=20)
    parser.add_argument("--verify-events", type=int, default=1_000_000)
    parser.add_argument("--recall-events", type=int, default=10_000)
    parser.add_argument("--recall-queries", type=int, default=200)
    parser.add_argument("--skip-append", action="store_true")
    parser.add_argument("--skip-verify", action="store_true")
    parser.add_argument("--skip-recall", action="store_true")
    parser.add_argument(
        "--no-index", action="store_true", help="recall without embedding the run's events first"
    )
    json_option_add(parser)
    args = parser.parse_args()
    with bench_summary(as_json=args.json, name="ledger_bench") as summary:
        django_setup()
        if not args.skip_append:
            bench_append(args.append_batches, 1000, summary)
        if not args.skip_recall:
            bench_salience(
                args.recall_events, args.recall_queries, index=not args.no_index, summary=summary
            )
        if not args.skip_verify:
            bench_verify(args.verify_events, summary)


if __name__ == "__main__":
    main()
