#!/usr/bin/env python3
"""Where the time of one API search goes, layer by layer (pyinstrument, in this process).

    python bench/request_profile.py                      # 400 profiled searches
    python bench/request_profile.py --requests 800 --html var/search-profile.html

Seeds the same data as bench/load.py (10 agents x 100 memories) on a private stack, warms up,
then sends ``--requests`` searches through Django's full handler (every middleware, DRF's
authentication, throttling, parsing, the search, serialisation and rendering: everything
gunicorn would run but the socket) under pyinstrument's sampling profiler, and prints the
milliseconds per request spent in each layer, then the call tree. Layers nest: a layer's time
includes the rows indented under it; "other" is what no row below names.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from _service import service_stack
from _setup import ROOT
from load import seed, sentence


@dataclass(frozen=True)
class Layer:
    label: str
    function: str
    # The end of the defining file's path, e.g. "rest_framework/views.py".
    file: str
    depth: int = 0


LAYERS = (
    Layer("the whole request (Django's handler)", "get_response", "django/core/handlers/base.py"),
    Layer("view, inside the middleware", "_get_response", "django/core/handlers/base.py", 1),
    Layer("DRF dispatch", "dispatch", "rest_framework/views.py", 2),
    Layer("authentication (API key)", "authenticate", "ledger/auth.py", 3),
    Layer("permissions", "check_permissions", "rest_framework/views.py", 3),
    Layer("rate limit", "check_throttles", "rest_framework/views.py", 3),
    Layer("parse and validate the body", "is_valid", "rest_framework/serializers.py", 3),
    Layer("the caller's agent", "agent_for_caller", "", 3),
    Layer("memories_search", "memories_search", "memory/search.py", 3),
    Layer("embed the query", "embed_query", "memory/embeddings.py", 4),
    Layer("lexeme statistics (SQL)", "memory_candidates_query", "memory/search.py", 4),
    Layer("memory candidates (SQL)", "_memory_candidates", "memory/search.py", 4),
    Layer("ledger candidates (SQL)", "_event_candidates", "memory/search.py", 4),
    Layer("knowledge-base candidates (SQL)", "_knowledge_candidates", "memory/search.py", 4),
    Layer("fuse and rank", "_ranked", "memory/search.py", 4),
    Layer("hits' text and details (SQL)", "memory_hits_completed", "memory/search.py", 4),
    Layer("queue the retrieval statistics", "_mark_retrieved", "memory/search.py", 4),
    Layer("serialise the answer", "data", "rest_framework/serializers.py", 3),
    Layer("render JSON", "rendered_content", "rest_framework/response.py", 2),
)


def frames(frame: Any) -> Iterator[Any]:
    yield frame
    for child in frame.children:
        yield from frames(child)


def layer_seconds(root: Any, layer: Layer) -> float:
    """Time in the outermost frames of the layer's function (recursion counted once)."""

    def matches(frame: Any) -> bool:
        return frame.function == layer.function and (
            not layer.file or (frame.file_path or "").endswith(layer.file)
        )

    def outermost(frame: Any) -> float:
        if matches(frame):
            return float(frame.time)
        return sum(outermost(child) for child in frame.children)

    return outermost(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--html", default="", help="also write pyinstrument's HTML report here")
    args = parser.parse_args()

    with service_stack(ROOT / "var" / "bench-profile", workers=1) as stack:
        _, key, agents = seed(stack, agents=10, memories_per_agent=100)
        from django.test import Client
        from pyinstrument import Profiler

        client = Client(HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_HOST="localhost")
        rng = random.Random(11)

        def search() -> None:
            body = {"agent": rng.choice(agents), "query": sentence(rng), "top_k": 5}
            response = client.post(
                "/api/v1/memories/search/", body, content_type="application/json"
            )
            assert response.status_code == 200, response.content

        for _ in range(args.warmup):
            search()
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as queries:
            search()
        print(f"one search's SQL statements: {len(queries.captured_queries)}")
        for query in queries.captured_queries:
            statement = " ".join(query["sql"].split())[:100]
            print(f"  {float(query['time']) * 1000:6.2f} ms  {statement}")
        print()
        from config.health import redis_client

        broker = redis_client()
        queued_before = int(broker.llen("celery"))
        profiler = Profiler(interval=0.0002)
        started = time.perf_counter()
        profiler.start()
        for _ in range(args.requests):
            search()
        profiler.stop()
        wall = (time.perf_counter() - started) * 1000 / args.requests
        time.sleep(1.0)  # the retrieval recorder thread queues after the answers
        queued = int(broker.llen("celery")) - queued_before
        print(f"Celery tasks queued: {queued / args.requests:.2f} per search (no worker runs here)")
        session = profiler.last_session
        assert session is not None
        root = session.root_frame()
        assert root is not None

        print(f"{args.requests} searches, {wall:.2f} ms each (wall clock, profiled)")
        print(f"{'layer':48s} {'ms/request':>10s} {'share':>6s}")
        whole = layer_seconds(root, LAYERS[0]) or 1.0
        cpu = session.cpu_time / session.duration if session.duration else 0.0
        print(f"this process was on a CPU {cpu:.0%} of the time (the rest: waiting)")
        for layer in LAYERS:
            seconds = layer_seconds(root, layer)
            label = "  " * layer.depth + layer.label
            print(f"{label:48s} {seconds * 1000 / args.requests:10.2f} {seconds / whole:6.1%}")
        print()
        print(profiler.output_text(unicode=True, color=False, show_all=False))
        if args.html:
            with open(args.html, "w") as out:
                out.write(profiler.output_html())
            print(f"HTML report: {args.html}")


if __name__ == "__main__":
    main()
