#!/usr/bin/env python3
"""Where the time of one API request goes, layer by layer, in CPU milliseconds.

    python bench/request_profile.py                      # 300 requests of bench/load.py's mix
    python bench/request_profile.py --requests 600 --op search
    python bench/request_profile.py --sampled --html var/search-profile.html   # + call tree

Seeds the same data as bench/load.py (10 agents x 100 memories) on a private stack, warms up,
then sends ``--requests`` requests of each operation (search, store, dissent, override: the
harness's mix, or only ``--op``) through Django's full handler in this process (every
middleware, DRF's authentication, rate limit, parsing, the service, serialisation and
rendering: everything gunicorn would run but the socket), each with an ``Idempotency-Key`` as
the harness sends it.

CPU time, not wall-clock time, so the figures hold on a machine other processes keep busy: each
layer's function is wrapped (wherever the code refers to it) by a timer of this thread's CPU
time (``time.thread_time``); a layer's time includes the rows indented under it, and a
recursive or nested call is counted once. Beside the Python side:

- **PostgreSQL**: the CPU time of this connection's server process (``/proc/<pid>/stat``),
  and the SQL statements per request;
- **Redis**: the CPU time of the embedded server (rate limit, read-your-writes, the broker);
- **other threads**: the rest of this process's CPU (the embedder's second thread, the
  retrieval recorder that queues Celery tasks);
- the Celery tasks queued per request (a worker runs them; not counted above).

Then the mix's weighted mean: the CPU a request of the harness costs the machine, so
``2 cores / that`` bounds the requests per second. ``--sampled`` adds pyinstrument's call tree.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial, wraps
from pathlib import Path
from typing import Any

from _service import service_stack
from _setup import ROOT
from load import OPERATIONS, request_for, seed


@dataclass(frozen=True)
class Layer:
    label: str
    # "module:attribute" or "module:Class.method"; wrapped wherever the code refers to it.
    target: str
    depth: int = 0


LAYERS = (
    Layer("the whole request (Django's handler)",
          "django.core.handlers.base:BaseHandler.get_response"),
    Layer("view, inside the middleware", "django.core.handlers.base:BaseHandler._get_response", 1),
    Layer("transaction, idempotency, DRF", "ledger.scoping:TenantScopedViewSet.dispatch", 2),
    Layer("authentication (API key)", "ledger.auth:ApiKeyAuthentication.authenticate", 3),
    Layer("permissions", "rest_framework.views:APIView.check_permissions", 3),
    Layer("rate limit (Redis)", "rest_framework.views:APIView.check_throttles", 3),
    Layer("query parameters and JSON body", "config.api:request_inputs_check", 3),
    Layer("Idempotency-Key claim", "ledger.idempotency:idempotency_claim", 3),
    Layer("the caller's agent", "memory.episodic.api:agent_for_caller", 3),
    Layer("memories_search", "memory.search.selectors:memories_search", 3),
    Layer("embed the query", "memory.embeddings.backends:embed_query", 4),
    Layer("memory candidates (SQL)", "memory.search.legs:memory_candidates", 4),
    Layer("ledger candidates (SQL)", "memory.search.legs:event_candidates", 4),
    Layer("knowledge-base candidates (SQL)", "memory.search.legs:knowledge_base_candidates", 4),
    Layer("fuse and rank", "memory.search.ranking:ranked", 4),
    Layer("hits' text and details (SQL)", "memory.search.selectors:memory_hits_completed", 4),
    Layer("queue the retrieval statistics", "memory.search.selectors:_mark_retrieved", 4),
    Layer("serialise the search's answer",
          "memory.search.serializers:SearchResultSerializer.to_representation", 3),
    Layer("memories_store", "memory.episodic.services:memories_store", 3),
    # The embedder, whoever calls it: a search's query (above) or the texts a write stores.
    Layer("embed texts (query or stored text)", "memory.embeddings.backends:embed_texts", 4),
    Layer("dissent_log", "trust.rounds.services:dissent_log", 3),
    Layer("override_log", "trust.rounds.overrides:override_log", 3),
    Layer("trust_recompute", "trust.scores.services:trust_recompute", 4),
    Layer("ledger append", "ledger.services:events_append", 4),
    Layer("Idempotency-Key record", "ledger.idempotency:idempotency_complete", 3),
    Layer("render JSON", "rest_framework.renderers:JSONRenderer.render", 2),
)  # fmt: skip


class LayerClock:
    """This thread's CPU seconds inside each wrapped function (outermost calls only)."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self._depth: Counter[str] = Counter()
        self._started: dict[str, float] = {}
        self._thread = threading.get_ident()

    def wrap(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self._thread:
                return function(*args, **kwargs)
            if self._depth[label] == 0:
                self._started[label] = time.thread_time()
            self._depth[label] += 1
            try:
                return function(*args, **kwargs)
            finally:
                self._depth[label] -= 1
                if self._depth[label] == 0:
                    self.seconds[label] += time.thread_time() - self._started[label]

        return timed


def install(clock: LayerClock, layers: tuple[Layer, ...]) -> None:
    """Wrap every layer's function: on its class, or in every module that refers to it."""
    import importlib

    for layer in layers:
        module_name, _, attribute = layer.target.partition(":")
        owner: Any = importlib.import_module(module_name)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)
        wrapped = clock.wrap(layer.label, original)
        if isinstance(owner, type):
            setattr(owner, name, wrapped)
            continue
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for key, value in list(namespace.items()):
                if value is original:
                    namespace[key] = wrapped


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of another process (PostgreSQL's backend, Redis), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Measured:
    requests: int
    layers: dict[str, float]
    request_thread: float
    other_threads: float
    postgres: float
    redis: float
    statements: float
    tasks: float


@contextmanager
def statement_counter() -> Iterator[list[int]]:
    from django.db import connection

    count = [0]

    def counted(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        count[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counted):
        yield count


def measure(send: Callable[[], None], requests: int, clock: LayerClock) -> Measured:
    from django.conf import settings
    from django.db import connection

    from config.health import redis_client

    send()  # the connection is open after a request
    backend = connection.connection.info.backend_pid
    redis_pid = int((settings.EMBEDDED.redis_dir / "redis.pid").read_text().strip())
    broker = redis_client()
    queued_before = int(broker.llen("celery"))
    clock.seconds.clear()
    pg_before, redis_before = process_cpu_seconds(backend), process_cpu_seconds(redis_pid)
    process_before, thread_before = time.process_time(), time.thread_time()
    with statement_counter() as statements:
        for _ in range(requests):
            send()
    thread = time.thread_time() - thread_before
    time.sleep(0.5)  # the retrieval recorder thread queues after the answers
    process = time.process_time() - process_before
    return Measured(
        requests=requests,
        layers=dict(clock.seconds),
        request_thread=thread,
        other_threads=max(0.0, process - thread),
        postgres=process_cpu_seconds(backend) - pg_before,
        redis=process_cpu_seconds(redis_pid) - redis_before,
        statements=statements[0] / requests,
        tasks=(int(broker.llen("celery")) - queued_before) / requests,
    )


def layer_seconds(measured: Measured, label: str) -> float:
    return measured.layers.get(label, 0.0)


def print_table(results: dict[str, Measured], weights: dict[str, float]) -> None:
    ops = list(results)
    total_weight = sum(weights[op] for op in ops)
    header = "".join(f"{op:>10s}" for op in ops) + (f"{'mix':>10s}" if len(ops) > 1 else "")
    print(f"CPU milliseconds per request, by layer ({', '.join(ops)}; mix = load.py's weights)")
    print(f"{'layer':46s}{header}")

    def row(label: str, value: Callable[[Measured], float]) -> None:
        figures = [value(results[op]) / results[op].requests * 1000 for op in ops]
        cells = "".join(f"{figure:10.2f}" for figure in figures)
        if len(ops) > 1:
            mixed = sum(f * weights[op] for f, op in zip(figures, ops, strict=True)) / total_weight
            cells += f"{mixed:10.2f}"
        print(f"{label:46s}{cells}")

    for layer in LAYERS:
        if not any(layer.label in results[op].layers for op in ops):
            continue
        row("  " * layer.depth + layer.label, partial(layer_seconds, label=layer.label))
    whole = LAYERS[0].label
    view = LAYERS[1].label
    print("of which")
    row("  middleware (whole - view)", lambda m: m.layers.get(whole, 0) - m.layers.get(view, 0))
    row("  test client around the handler", lambda m: m.request_thread - m.layers.get(whole, 0))
    print("beside this thread")
    row("  other threads of this process", lambda m: m.other_threads)
    row("  PostgreSQL server process", lambda m: m.postgres)
    row("  Redis server", lambda m: m.redis)
    row(
        "server CPU per request (handler+threads+PG+Redis)",
        lambda m: m.layers.get(whole, 0) + m.other_threads + m.postgres + m.redis,
    )
    print("counts per request")
    cells = "".join(f"{results[op].statements:10.1f}" for op in ops)
    print(f"{'  SQL statements':46s}{cells}")
    cells = "".join(f"{results[op].tasks:10.2f}" for op in ops)
    print(f"{'  Celery tasks queued (run by a worker)':46s}{cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="measured requests per op")
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--op", choices=[op for op, _ in OPERATIONS], help="only this operation")
    parser.add_argument("--sampled", action="store_true", help="also pyinstrument's call tree")
    parser.add_argument("--html", default="", help="with --sampled, write its HTML report here")
    args = parser.parse_args()
    load1, load5, _ = os.getloadavg()
    print(f"load average at the start: {load1:.2f} / {load5:.2f} (CPU figures hold under load)")

    # As bench/_service.py sets it for the servers: the limit is checked (its Redis calls are
    # measured) but never refuses the profile, whose requests would otherwise run into it.
    os.environ.setdefault("API_RATE_LIMIT", "100000000")
    with service_stack(ROOT / "var" / "bench-profile", workers=1) as stack:
        _, key, agents = seed(stack, agents=10, memories_per_agent=100)
        ops = [args.op] if args.op else [op for op, _ in OPERATIONS]
        results, send = profile_ops(key, agents, ops, requests=args.requests, warmup=args.warmup)
        print_table(results, dict(OPERATIONS))
        load1, load5, _ = os.getloadavg()
        print(f"load average at the end: {load1:.2f} / {load5:.2f}")
        if args.sampled:
            sampled(send[ops[0]], args.requests, args.html)


def profile_ops(
    key: str, agents: list[str], ops: list[str], *, requests: int, warmup: int
) -> tuple[dict[str, Measured], dict[str, Callable[[], None]]]:
    """Each op's CPU by layer over ``requests`` requests after ``warmup``, through Django's
    handler in this process (Django set up on the stack's database); and each op's sender."""
    from django.test import Client

    clock = LayerClock()
    # Before the client's first request: Django's handler binds its view step then.
    install(clock, LAYERS)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_HOST="localhost")
    rng = random.Random(11)

    def sender(op: str) -> Callable[[], None]:
        def send() -> None:
            path, body, _ = request_for(op, rng, agents)
            response = client.post(
                path, body, content_type="application/json",
                HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()),
            )  # fmt: skip
            assert response.status_code in (200, 201), response.content

        return send

    senders = {op: sender(op) for op in ops}
    for op in ops:
        for _ in range(warmup):
            senders[op]()
    return {op: measure(senders[op], requests, clock) for op in ops}, senders


def sampled(send: Callable[[], None], requests: int, html: str) -> None:
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0002)
    profiler.start()
    for _ in range(requests):
        send()
    profiler.stop()
    print(profiler.output_text(unicode=True, color=False, show_all=False))
    if html:
        Path(html).write_text(profiler.output_html())
        print(f"HTML report: {html}")


if __name__ == "__main__":
    main()
