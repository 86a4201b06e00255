#!/usr/bin/env python3
"""Memory store throughput against the embedder's own (issue 4): target >= 80 %.

    python bench/memory_ingest.py                          # 20 batches of 100 LoCoMo turns
    python bench/memory_ingest.py --batches 5 --batch-size 50

Storing a memory embeds it, so the embedder bounds the store. For each batch of texts (LoCoMo
dev turns in conversation order, with their speaker, session and session date) the same run
measures, back to back:

* raw:        the configured embedding backend on exactly the texts the store embeds
              ("[date] speaker: content"), one call per batch (the baseline; the local
              backend runs it in length-sorted pieces of 32, see LocalEmbedder.embed);
* in-process: memory.episodic.services.memories_store(agent=..., drafts=batch) (policies, embedding,
              insert, keyword documents, ledger events with sealed content, one transaction);
* HTTP:       POST /api/v1/memories/batch/ to gunicorn (config.wsgi) over a kept-alive
              connection: the same work plus JSON and DRF.

A Celery worker runs beside them, as under ``make up``: a batch's consolidation is judged after
its store (``CONSOLIDATION_DEFER_BATCHES``), and every store's ledger events are embedded, in the
worker, on the same 2 cores. After the last batch the bench waits until the worker is idle and
prints how long that took and what consolidation wrote. ``--consolidation inline`` judges each
batch before it answers instead (``defer_consolidation: false``), for the comparison.

The raw paths call the configured backend itself, not ``embed_texts``: that function keeps the
vectors of recent texts (``EMBEDDING_CACHE_TEXTS``), and a store after it would be handed this
batch's vectors for free. The stores use the cache as a server does.

Each path has its own agent, so the three see the same data. Rates are memories/s per batch;
the ratio of a store path to raw is taken per batch (the three calls run within seconds of each
other, so a noisy neighbour hits them alike) and its median is reported. The in-process store
is also broken down by stage (the service's collaborators wrapped with timers).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _locomo import DEFAULT_DATA, load_locomo
from _service import background_drained, celery_worker, service_stack
from _setup import ROOT, bench_summary, json_option_add, load_bar, percentile

TARGET_RATIO = 0.80


def locomo_items(path: Path, count: int) -> list[dict[str, Any]]:
    """``count`` memories as the batch API takes them, cycling through the LoCoMo turns."""
    convs, _ = load_locomo(path)
    items = []
    for conv in convs:
        for session in conv.sessions:
            for turn in session.turns:
                when = session.when or datetime(2023, 1, 1, tzinfo=UTC)
                items.append(
                    {
                        "content": turn.with_caption(),
                        "session_id": f"{conv.sample_id}/session_{session.number}",
                        "occurred_at": when.isoformat(),
                        "metadata": {"speaker": turn.speaker, "dia_id": turn.dia_id},
                    }
                )
    while len(items) < count:
        items = items + items
    return items[:count]


@contextmanager
def stage_timers(totals: dict[str, float]) -> Iterator[None]:
    """Wrap memories_store's collaborators so each call adds its seconds to ``totals``."""
    import memory.episodic.services
    from memory.models import Memory

    # Patched by name: the names are its imports, not exports.
    services: Any = memory.episodic.services
    manager: Any = Memory.objects

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                totals[name] += time.perf_counter() - started

        return wrapper

    names = (
        "embed_texts",
        "consolidation_plan",
        "_speakers_fill",
        "search_documents_for_new",
        "search_documents_refresh_after_insert",
        "events_append",
    )
    originals = {name: getattr(services, name) for name in names}
    try:
        for name, function in originals.items():
            setattr(services, name, timed(name, function))
        manager.bulk_create = timed("Memory bulk insert", manager.bulk_create)
        yield
    finally:
        for name, function in originals.items():
            setattr(services, name, function)
        del manager.bulk_create


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "var" / "bench-memory-ingest")
    parser.add_argument("--workers", type=int, default=1, help="gunicorn worker processes")
    parser.add_argument("--keep", action="store_true", help="keep the data folder afterwards")
    parser.add_argument(
        "--consolidation",
        choices=("deferred", "inline"),
        default="deferred",
        help="judge each batch's neighbours after the store (the default) or before it answers",
    )
    json_option_add(parser)
    args = parser.parse_args()
    with bench_summary(as_json=args.json, name="memory_ingest") as summary:
        ingest(args, summary)


def ingest(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    size = args.batch_size
    items = locomo_items(args.data, (args.batches + 1) * size)  # +1: the warm-up batch
    print(
        f"{args.batches} batches of {size} LoCoMo turns (+1 warm-up batch); "
        f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )

    deferred = args.consolidation == "deferred"
    with (
        service_stack(args.data_dir, workers=args.workers, keep=args.keep) as stack,
        celery_worker(stack),
    ):
        from ledger.models import Agent
        from ledger.services import agent_create
        from memory.embeddings.backends import embedder
        from memory.episodic.serializers import MemoryInputSerializer
        from memory.episodic.services import memories_store, memory_embedding_text

        key = stack.admin_key(slug="bench-ingest")
        api = stack.client(key)
        status, body, _ = api.post("/api/v1/agents/", {"name": "ingest-http"})
        if status != 201:
            raise SystemExit(f"creating the HTTP agent: HTTP {status}: {body}")
        http_agent = Agent.objects.get(pk=body["id"])
        local_agent = agent_create(tenant=http_agent.tenant, name="ingest-local", actor="system")

        def drafts_of(batch: list[dict[str, Any]]) -> list[Any]:
            serializer = MemoryInputSerializer(data=batch, many=True)
            serializer.is_valid(raise_exception=True)
            return [MemoryInputSerializer().to_draft(d) for d in serializer.validated_data]

        def embedded_texts(batch: list[dict[str, Any]]) -> list[str]:
            return [
                memory_embedding_text(
                    content=d.content,
                    role=d.role,
                    metadata=d.metadata,
                    when=d.occurred_at,
                )
                for d in drafts_of(batch)
            ]

        rates: dict[str, list[float]] = defaultdict(list)
        ratios: dict[str, list[float]] = defaultdict(list)
        stages: dict[str, float] = defaultdict(float)
        store_seconds = 0.0
        bar = load_bar(total=(args.batches + 1) * size, description="store", unit="memory")
        for number in range(args.batches + 1):
            batch = items[number * size : (number + 1) * size]
            texts = embedded_texts(batch)
            drafts = drafts_of(batch)

            started = time.perf_counter()
            embedder().embed(texts)
            raw = time.perf_counter() - started

            with stage_timers(stages if number else defaultdict(float)):
                started = time.perf_counter()
                memories_store(
                    agent=local_agent, drafts=drafts, actor="system", defer_consolidation=deferred
                )
                local = time.perf_counter() - started

            status, body, http_ms = api.post(
                "/api/v1/memories/batch/",
                {"agent": http_agent.name, "memories": batch, "defer_consolidation": deferred},
            )
            if status != 201:
                raise SystemExit(f"batch {number}: HTTP {status}: {body}")
            bar.update(size)
            if number == 0:
                continue  # warm-up: model loads, first connections, caches
            store_seconds += local
            rates["raw embedder"].append(size / raw)
            rates["store, in-process"].append(size / local)
            rates["store, HTTP"].append(size / (http_ms / 1000))
            ratios["store, in-process"].append(raw / local)
            ratios["store, HTTP"].append(raw / (http_ms / 1000))
        bar.close()
        api.close()
        drained = background_drained()
        from ledger.models import Event
        from memory.consolidation.services import PROPOSED, SUPERSEDED

        written = {
            kind: Event.objects.filter(tenant=http_agent.tenant, kind=kind).count()
            for kind in (SUPERSEDED, PROPOSED)
        }

    print(f"\nthroughput, memories/s per batch of {size} (over {args.batches} batches):")
    summary["memories_per_s"] = {name: statistics.median(v) for name, v in rates.items()}
    summary["store_over_raw"] = {name: statistics.median(v) for name, v in ratios.items()}
    summary["target_ratio"] = TARGET_RATIO
    summary["stage_seconds"] = dict(stages)
    summary["batches"], summary["batch_size"] = args.batches, size
    for name, values in rates.items():
        print(
            f"  {name:18} median {statistics.median(values):7.1f}  "
            f"p5 {percentile(values, 0.05):7.1f}  p95 {percentile(values, 0.95):7.1f}"
        )
    print("store / raw embedder, per batch (median of the per-batch ratios):")
    for name, values in ratios.items():
        ratio = statistics.median(values)
        print(
            f"  {name:18} {ratio:6.1%}  (p5 {percentile(values, 0.05):.1%}, "
            f"p95 {percentile(values, 0.95):.1%}); target >= {TARGET_RATIO:.0%}: "
            f"{'met' if ratio >= TARGET_RATIO else 'NOT met'}"
        )
    print("in-process store time by stage (share of all store time, warm-up excluded):")
    accounted = 0.0
    for name, seconds in sorted(stages.items(), key=lambda item: -item[1]):
        accounted += seconds
        print(f"  {name:38} {seconds:7.2f} s  {seconds / store_seconds:6.1%}")
    other = store_seconds - accounted
    print(f"  {'other (policies, keys, ORM, ...)':38} {other:7.2f} s  {other / store_seconds:6.1%}")
    print(
        f"consolidation {args.consolidation}; the worker (consolidation, ledger events' "
        f"embeddings) was idle {drained:.1f} s after the last store; events written: "
        + ", ".join(f"{kind} {count}" for kind, count in written.items())
    )
    summary["consolidation"] = args.consolidation
    summary["background_drained_s"] = drained
    summary["consolidation_events"] = written
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
