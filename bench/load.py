#!/usr/bin/env python3
"""Load and fault harness (issue 9) on loopback, against the production server configuration.

    python bench/load.py                                  # levels 2,4,8,16 for 15 s each
    python bench/load.py --levels 4,8 --duration 10 --max-requests 1500
    python bench/load.py --levels 8 --faults              # and a run with the three faults

The service is what ``bench/_service.py`` starts: gunicorn (gthread) serving ``config.wsgi`` with
``config.settings`` on its own embedded PostgreSQL and Redis under var/bench-load, plus a real
Celery worker. Rate limiting stays on (set high enough not to refuse the harness).

Each level runs N client threads, each on its own kept-alive connection, for ``--duration``
seconds or until the level's ``--max-requests`` are sent. An operation is drawn per request:
search 70 %, memory store 20 %, dissent or override 10 % (half each). Every POST carries an
``Idempotency-Key``; on a 503, a 429 or a broken connection the client waits (100 ms, doubling
to 1 s) and sends the same request with the same key again, for up to 60 s. A write counts as
acknowledged once it is answered 201; its unique marker is remembered.

With ``--faults`` one more run at the last level lasts ``--fault-duration`` seconds, during which
the harness SIGKILLs the Celery worker (and starts a new one), restarts Redis, then restarts
PostgreSQL, and reports for each the 503s seen and the time from the dependency's return to the
next answered request.

Afterwards every acknowledged write is looked up by its marker in the database: it must be there
exactly once (lost = 0), and no marker (acknowledged or not) may be stored twice (duplicated =
0); then every tenant's hash chain is verified. Figures are printed with the load average.

At the end: the server's own time per route (its /metrics histograms), where the time of a request
goes (``bench/request_profile.py``'s CPU milliseconds by layer for each op of the mix, sent
``--profile-requests`` times through Django's handler in this process on the same data), one line
per level, and the figure the issue asks for: the highest requests/s of a level whose p99 was at
most 250 ms with no errors.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _service import Stack, celery_worker, service_stack, start_worker
from _setup import ROOT, bench_summary, json_option_add, load_bar, percentile

P99_TARGET_MS = 250
OPERATIONS = (("search", 0.70), ("store", 0.20), ("dissent", 0.05), ("override", 0.05))
RETRY_STATUSES = {429, 502, 503, 504}
RUBRIC = ["accuracy", "evidence", "safety", "scope"]
RETRY_FOR_SECONDS = 60.0
WORDS = [
    *("ledger", "vector", "trust", "dissent", "rubric", "override", "memory", "search"),
    *("agent", "review", "budget", "token", "pipeline", "release", "deadline", "migration"),
    *("rollback", "incident", "latency", "cache", "quota", "schedule"),
]


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter[str] = field(default_factory=Counter)
    answered_503: int = 0
    retries: int = 0
    acknowledged: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    attempted: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    ok_times: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Connection:
    """One kept-alive HTTP/1.1 connection; reconnects after the server or a fault closed it."""

    def __init__(self, port: int, key: str) -> None:
        self.port = port
        self.key = key
        self.http: http.client.HTTPConnection | None = None

    def send(self, method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        if self.http is None:
            self.http = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        sent = {
            "Authorization": f"Bearer {self.key}",
            "Content-Type": "application/json",
            **headers,
        }
        try:
            self.http.request(method, path, body=json.dumps(body), headers=sent)
            response = self.http.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            self.http.close()
            self.http = None
            raise
        if response.getheader("Connection", "").lower() == "close":
            self.http.close()
            self.http = None
        return response.status, (json.loads(raw) if raw else None)


def sentence(rng: random.Random, marker: str = "") -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
    return f"{words} {marker}".strip()


def request_for(op: str, rng: random.Random, agents: list[str]) -> tuple[str, dict[str, Any], str]:
    """(path, body, marker): the marker is unique text that finds the row again afterwards."""
    agent = rng.choice(agents)
    marker = f"m{uuid.uuid4().hex}"
    if op == "search":
        return "/api/v1/memories/search/", {"agent": agent, "query": sentence(rng), "top_k": 5}, ""
    if op == "store":
        return "/api/v1/memories/", {"agent": agent, "content": sentence(rng, marker)}, marker
    if op == "dissent":
        citations = rng.sample(RUBRIC, 2)
        body = {"agent": agent, "text": sentence(rng, marker), "rubric_citations": citations}
        return "/api/v1/dissents/", body, marker
    body = {
        "agent": agent,
        "agent_output": sentence(rng, marker),
        "human_decision": sentence(rng),
        "decided_by": "load-reviewer",
    }
    return "/api/v1/overrides/", body, marker


def one_operation(
    connection: Connection, op: str, rng: random.Random, agents: list[str], tally: Tally
) -> None:
    path, body, marker = request_for(op, rng, agents)
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    if marker:
        with tally.lock:
            tally.attempted[op].append(marker)
    started_all = time.monotonic()
    pause = 0.1
    while True:
        started = time.perf_counter()
        try:
            status, answer = connection.send("POST", path, body, headers)
        except (OSError, http.client.HTTPException):
            status, answer = 0, None
        elapsed = (time.perf_counter() - started) * 1000
        if status in (200, 201):
            with tally.lock:
                tally.latencies[op].append(elapsed)
                tally.ok_times.append(time.monotonic())
                if marker:
                    tally.acknowledged[op].append(marker)
            return
        retryable = status in RETRY_STATUSES or status == 0
        with tally.lock:
            tally.answered_503 += status == 503
            if not retryable or time.monotonic() - started_all > RETRY_FOR_SECONDS:
                code = (answer or {}).get("error", {}).get("code", "") if answer else ""
                tally.errors[f"{op} {status} {code}".strip()] += 1
                return
            tally.retries += 1
        time.sleep(pause)
        pause = min(1.0, pause * 2)


def run_level(
    stack: Stack,
    key: str,
    agents: list[str],
    *,
    threads: int,
    duration: float,
    budget: int,
    operations: tuple[tuple[str, float], ...] = OPERATIONS,
) -> tuple[Tally, float]:
    tally = Tally()
    sent = iter(range(budget))
    sent_lock = threading.Lock()
    deadline = time.monotonic() + duration
    names = [name for name, _ in operations]
    weights = [weight for _, weight in operations]

    def client(seed: int) -> None:
        rng = random.Random(seed)
        connection = Connection(stack.port, key)
        while time.monotonic() < deadline:
            with sent_lock:
                if next(sent, None) is None:
                    return
            one_operation(connection, rng.choices(names, weights)[0], rng, agents, tally)

    workers = [threading.Thread(target=client, args=(seed,)) for seed in range(threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return tally, time.monotonic() - started


def print_level(label: str, tally: Tally, seconds: float) -> dict[str, Any]:
    total = sum(len(values) for values in tally.latencies.values())
    load1, load5, _ = os.getloadavg()
    print(
        f"\n{label}: {total} answered in {seconds:.1f} s = {total / seconds:.1f} req/s; "
        f"errors {sum(tally.errors.values())} {dict(tally.errors) or ''}; 503s seen "
        f"{tally.answered_503}; retries {tally.retries}; load average {load1:.2f} / {load5:.2f}"
    )
    every = [value for values in tally.latencies.values() for value in values]
    row: dict[str, Any] = {"throughput": total / seconds, "errors": sum(tally.errors.values())}
    for op, values in [*sorted(tally.latencies.items()), ("all", every)]:
        if not values:
            continue
        p50, p95, p99 = (percentile(values, share) for share in (0.5, 0.95, 0.99))
        print(f"  {op:9s} n={len(values):6d}  p50 {p50:7.1f}  p95 {p95:7.1f}  p99 {p99:7.1f} ms")
        row[op] = (p50, p95, p99)
    return row


# --- Celery worker ------------------------------------------------------------------------------


# --- Faults -------------------------------------------------------------------------------------


def kill_worker_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker's main process and its pool children, as the OOM killer would."""
    children = subprocess.run(
        ["pgrep", "-P", str(process.pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    for pid in [process.pid, *map(int, children)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait()


def run_faults(
    stack: Stack, key: str, agents: list[str], workers: list[subprocess.Popen[bytes]], args: Any
) -> tuple[Tally, float, list[tuple[str, float, float]]]:
    """Load at the last level while the faults happen one after another; (tally, seconds,
    [(fault, outage seconds, first answer after the dependency's return)])."""
    from django.conf import settings
    from django.db import connections

    from config import embedded, embedded_redis

    threads = int(args.levels.split(",")[-1])
    result: dict[str, Any] = {}
    faults: list[tuple[str, float, float]] = []

    def load() -> None:
        result["tally"], result["seconds"] = run_level(
            stack, key, agents, threads=threads, duration=args.fault_duration, budget=10**9
        )

    runner = threading.Thread(target=load)
    runner.start()
    third = args.fault_duration / 4

    def postgres_back() -> None:
        embedded.postgres_start(settings.EMBEDDED)
        connections.close_all()  # this process's connections died with the server

    steps: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        ("SIGKILL celery worker", lambda: kill_worker_group(workers[-1]),
         lambda: workers.append(start_worker(stack))),
        ("restart Redis", lambda: embedded_redis.redis_stop(settings.EMBEDDED),
         lambda: embedded_redis.redis_start(settings.EMBEDDED)),
        ("restart PostgreSQL", lambda: embedded.postgres_stop(settings.EMBEDDED), postgres_back),
    ]  # fmt: skip
    for name, stop, start in steps:
        time.sleep(third)
        down_at = time.monotonic()
        stop()
        time.sleep(args.outage_seconds)
        start()
        back_at = time.monotonic()
        faults.append((name, back_at - down_at, back_at))
    runner.join()
    tally = result["tally"]
    measured = []
    for name, outage, back_at in faults:
        after = [moment for moment in tally.ok_times if moment >= back_at]
        measured.append((name, outage, (min(after) - back_at) if after else float("nan")))
    return tally, result["seconds"], measured


# --- Verification -------------------------------------------------------------------------------


def verify_writes(tallies: list[Tally], tenant: Any) -> tuple[int, int, int]:
    """(acknowledged, lost, duplicated) over every level's writes, looked up by marker."""
    from memory.models import Memory
    from trust.models import Dissent, Override

    tables = {
        "store": (Memory, "content"),
        "dissent": (Dissent, "text"),
        "override": (Override, "agent_output"),
    }
    acknowledged = lost = duplicated = 0
    for op, (model, column) in tables.items():
        acked = {marker for tally in tallies for marker in tally.acknowledged[op]}
        tried = {marker for tally in tallies for marker in tally.attempted[op]}
        counts: Counter[str] = Counter()
        rows = model.objects.filter(tenant=tenant).values_list(column, flat=True)  # type: ignore[attr-defined]
        for text in rows.iterator():
            marker = text.rsplit(" ", 1)[-1]
            if marker in tried:
                counts[marker] += 1
        acknowledged += len(acked)
        lost += sum(1 for marker in acked if counts[marker] == 0)
        duplicated += sum(1 for count in counts.values() if count > 1)
    return acknowledged, lost, duplicated


def verify_chain() -> str:
    from io import StringIO

    from django.core.management import CommandError, call_command

    output = StringIO()
    try:
        call_command("verify_ledger", stdout=output, stderr=output)
    except (CommandError, SystemExit) as exc:
        # verify_ledger raises CommandError (exit status 1) for a broken chain.
        return f"FAILED ({exc}): {output.getvalue().strip()}"
    return output.getvalue().strip().splitlines()[-1] if output.getvalue().strip() else "ok"


# --- Setup --------------------------------------------------------------------------------------


def seed(stack: Stack, *, agents: int, memories_per_agent: int) -> tuple[Any, str, list[str]]:
    tenant, key = stack.tenant_with_admin_key(slug="load")
    api = stack.client(key)
    criteria = [{"name": name, "description": f"criterion {name}"} for name in RUBRIC]
    status, body, _ = api.post("/api/v1/rubric/", {"criteria": criteria})
    assert status == 201, body
    names = [f"LoadAgent{number:02d}" for number in range(agents)]
    rng = random.Random(7)
    bar = load_bar(total=agents * memories_per_agent, description="seed", unit="memory")
    for name in names:
        status, body, _ = api.post("/api/v1/agents/", {"name": name})
        assert status == 201, body
        batch = [{"content": sentence(rng)} for _ in range(memories_per_agent)]
        status, body, _ = api.post("/api/v1/memories/batch/", {"agent": name, "memories": batch})
        assert status == 201, body
        bar.update(memories_per_agent)
    bar.close()
    api.close()
    return tenant, key, names


def print_server_side(answered: int) -> None:
    """The server's own figures (config.metrics, every gunicorn and worker process of the stack):
    mean time per route inside Django, and the Celery tasks each answered request cost."""
    from prometheus_client import CollectorRegistry, multiprocess

    from config import metrics  # noqa: F401 (points prometheus_client at the stack's folder)

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    samples = [sample for family in registry.collect() for sample in family.samples]

    def total(name: str, key: str) -> Counter[str]:
        found: Counter[str] = Counter()  # of float values: seconds, counts
        for sample in samples:
            if sample.name == name:
                found[sample.labels.get(key, "")] += sample.value  # type: ignore[assignment]
        return found

    seconds = total("agent_memory_http_request_duration_seconds_sum", "route")
    counts = total("agent_memory_http_request_duration_seconds_count", "route")
    print("server time per request, mean (Django's handler, from /metrics' histograms):")
    for route, count in counts.most_common(6):
        print(f"  {route:40s} n={int(count):6d}  {seconds[route] / count * 1000:7.1f} ms")
    tasks = total("agent_memory_celery_tasks_total", "task")
    print(f"Celery task runs per answered request ({answered} answered):")
    for task, runs in tasks.most_common():
        print(f"  {task:48s} {runs:7.0f}  {runs / max(answered, 1):5.2f}")


def where_the_time_goes(key: str, agents: list[str], requests: int) -> None:
    """bench/request_profile.py's table for this stack: CPU per request by layer, each op of the
    mix sent ``requests`` times through Django's handler in this process (the servers are idle
    by now, so the figures are the requests' own)."""
    from request_profile import print_table, profile_ops

    ops = [op for op, _ in OPERATIONS]
    print(f"\nwhere the time of a request goes ({requests} of each op in this process):")
    results, _ = profile_ops(key, agents, ops, requests=requests, warmup=max(10, requests // 5))
    print_table(results, dict(OPERATIONS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="2,4,8,16", help="client threads per level")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per level")
    parser.add_argument("--max-requests", type=int, default=3000, help="requests per level")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--memories-per-agent", type=int, default=100)
    parser.add_argument("--faults", action="store_true", help="add the run with faults")
    parser.add_argument("--fault-duration", type=float, default=40.0)
    parser.add_argument("--outage-seconds", type=float, default=3.0, help="each dependency down")
    parser.add_argument("--keep", action="store_true", help="keep var/bench-load afterwards")
    parser.add_argument(
        "--profile-requests", type=int, default=100,
        help="requests of each op for the CPU-by-layer table at the end (0: none)",
    )  # fmt: skip
    json_option_add(parser)
    args = parser.parse_args()
    with bench_summary(as_json=args.json, name="load") as summary:
        load_measure(args, summary)


def load_measure(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    # The limiter stays in the request path; the harness's one key must not trip it.
    os.environ["API_RATE_LIMIT"] = "100000000"
    print(f"load average before start: {os.getloadavg()}")
    with service_stack(ROOT / "var" / "bench-load", workers=args.workers, keep=args.keep) as stack:
        print(f"gunicorn: {args.workers} workers x 4 threads (gthread) on port {stack.port}")
        tenant, key, agents = seed(
            stack, agents=args.agents, memories_per_agent=args.memories_per_agent
        )
        # Warm-up, not measured: each gunicorn worker loads the embedding model on first use.
        warm_up, _ = run_level(stack, key, agents, threads=args.workers * 2, duration=30, budget=40)
        tallies: list[Tally] = [warm_up]
        rows: list[tuple[int, dict[str, Any]]] = []
        with celery_worker(stack) as workers:
            for threads in (int(level) for level in args.levels.split(",")):
                tally, seconds = run_level(
                    stack, key, agents, threads=threads, duration=args.duration,
                    budget=args.max_requests,
                )  # fmt: skip
                tallies.append(tally)
                rows.append((threads, print_level(f"{threads} clients", tally, seconds)))
            if args.faults:
                tally, seconds, faults = run_faults(stack, key, agents, workers, args)
                tallies.append(tally)
                print_level(f"faults at {args.levels.split(',')[-1]} clients", tally, seconds)
                for name, outage, recovery in faults:
                    print(
                        f"  {name}: down {outage:.1f} s; first answer {recovery:.2f} s "
                        "after it was back"
                    )
        acknowledged, lost, duplicated = verify_writes(tallies, tenant)
        summary["levels"] = {f"{threads} clients": row for threads, row in rows}
        summary["writes"] = {"acknowledged": acknowledged, "lost": lost, "duplicated": duplicated}
        print(
            f"\nwrites acknowledged {acknowledged}, lost {lost}, duplicated {duplicated}; "
            f"ledger chain: {verify_chain()}"
        )
        print_server_side(sum(len(v) for t in tallies for v in t.latencies.values()))
        if args.profile_requests:
            where_the_time_goes(key, agents, args.profile_requests)
        meeting = [
            (row["throughput"], threads)
            for threads, row in rows
            if row.get("all") and row["all"][2] <= P99_TARGET_MS and row["errors"] == 0
        ]
        print()
        for threads, row in rows:
            p99 = row["all"][2] if row.get("all") else float("nan")
            print(f"  {threads:3d} clients: {row['throughput']:6.1f} req/s, p99 {p99:7.1f} ms, "
                  f"errors {row['errors']}")  # fmt: skip
        if meeting:
            best, threads = max(meeting)
            print(f"REQUESTS/S AT p99 <= {P99_TARGET_MS} ms (no errors): {best:.1f} at "
                  f"{threads} clients (target >= 65)")  # fmt: skip
        else:
            print(f"REQUESTS/S AT p99 <= {P99_TARGET_MS} ms (no errors): none of the levels met it")
        print(f"load average at the end: {os.getloadavg()}")
        if lost or duplicated:
            sys.exit(1)


if __name__ == "__main__":
    main()
