"""Shared timing of pages for bench/pages_bench.py and bench/dashboards_bench.py.

Each page is requested through Django's whole stack in this process, and after every request
the same fixed workload (a Python loop and a SQL query of constant cost) is timed too: on a
machine shared with other work, the page's p95 divided by that baseline's median, both taken in
the same moments, says more than the milliseconds alone. The load average is printed with them.

Each request's CPU time is measured too: this process's (``time.process_time``) plus that of its
PostgreSQL backend (``/proc/<pid>/schedstat``, nanoseconds on a CPU). It leaves out the time
spent waiting for a CPU, which is what other work on the machine adds: the server time the page
would take on a machine of its own, not counting I/O waits (the data is in memory).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

from _setup import percentile

TARGET_P95_MS = 150.0
BASELINE_SQL = "SELECT sum(g) FROM generate_series(1, 100000) AS g"


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _backend_cpu_s() -> float:
    from django.db import connection

    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    try:
        with open(f"/proc/{pid}/schedstat") as stat:
            return int(stat.read().split()[0]) / 1e9
    except OSError:  # PostgreSQL on another machine (DATABASE_URL): this process's alone
        return 0.0


def server_cpu_s() -> float:
    """CPU seconds used so far by this process and its PostgreSQL backend."""
    return time.process_time() + _backend_cpu_s()


def baseline_ms() -> float:
    """One run of the fixed workload, in ms."""
    from django.db import connection

    started = time.perf_counter()
    sum(i * i for i in range(50_000))
    with connection.cursor() as cursor:
        cursor.execute(BASELINE_SQL)
        cursor.fetchone()
    return (time.perf_counter() - started) * 1000


@dataclass
class PageTiming:
    name: str
    times: list[float]
    cpu: list[float]
    baseline: list[float]
    # (ms, SQL) of one request's queries.
    queries: list[tuple[float, str]]

    @property
    def p50(self) -> float:
        return percentile(self.times, 0.5)

    @property
    def p95(self) -> float:
        return percentile(self.times, 0.95)

    @property
    def cpu_p95(self) -> float:
        return percentile(self.cpu, 0.95)

    @property
    def ratio(self) -> float:
        return self.p95 / statistics.median(self.baseline)

    @property
    def met(self) -> bool:
        return self.p95 <= TARGET_P95_MS

    def line(self) -> str:
        sql_ms = sum(ms for ms, _ in self.queries)
        return (
            f"  {self.name:<50} p50 {self.p50:6.1f} ms  p95 {self.p95:6.1f} ms"
            f"  {'met' if self.met else 'NOT met':7}  CPU p95 {self.cpu_p95:5.1f} ms"
            f" {'met' if self.cpu_p95 <= TARGET_P95_MS else 'NOT met':7}"
            f"  p95/baseline {self.ratio:5.1f}"
            f"  {len(self.queries):2d} queries ({sql_ms:.1f} ms SQL)"
        )


def page_time(
    client: Any, name: str, url: str, *, runs: int, warm_up: int, headers: dict[str, str]
) -> PageTiming:
    """``runs`` requests of the page, each followed by one run of the baseline workload."""
    from django.db import connection

    for _ in range(warm_up):
        assert client.get(url, headers=headers).status_code == 200, url
    queries: list[tuple[float, str]] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            queries.append(((time.perf_counter() - started) * 1000, sql))

    with connection.execute_wrapper(count):
        client.get(url, headers=headers)
    times, cpu, baseline = [], [], []
    for _ in range(runs):
        cpu_before = server_cpu_s()
        started = time.perf_counter()
        response = client.get(url, headers=headers)
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((server_cpu_s() - cpu_before) * 1000)
        assert response.status_code == 200, url
        baseline.append(baseline_ms())
    return PageTiming(name=name, times=times, cpu=cpu, baseline=baseline, queries=queries)


def pages_report(timings: list[PageTiming], *, load_before: str) -> None:
    """The summary under the per-page lines: the slowest page, the verdict, the machine."""
    baseline = statistics.median(ms for timing in timings for ms in timing.baseline)
    worst = max(timings, key=lambda timing: timing.p95)
    verdict = "met" if all(timing.met for timing in timings) else "NOT met"
    cpu_worst = max(timings, key=lambda timing: timing.cpu_p95)
    cpu_verdict = "met" if cpu_worst.cpu_p95 <= TARGET_P95_MS else "NOT met"
    print(
        f"\nslowest p95 {worst.p95:.1f} ms ({worst.name}); target p95 <= {TARGET_P95_MS:.0f} ms"
        f" on every page: {verdict}"
    )
    print(
        f"slowest CPU p95 {cpu_worst.cpu_p95:.1f} ms ({cpu_worst.name}; this process and its"
        f" PostgreSQL backend): {cpu_verdict}"
    )
    print(
        f"baseline workload median {baseline:.1f} ms (after each request: a 50,000-step Python"
        f" loop and {BASELINE_SQL!r}); load average before {load_before},"
        f" after {load_average()} on {os.cpu_count()} cores"
    )


def pages_figures(timings: list[PageTiming]) -> dict[str, Any]:
    """The per-page figures for a benchmark's ``--json`` summary."""
    return {
        timing.name: {
            "p50_ms": timing.p50,
            "p95_ms": timing.p95,
            "cpu_p95_ms": timing.cpu_p95,
            "p95_over_baseline": timing.ratio,
            "met": timing.met,
            "queries": len(timing.queries),
        }
        for timing in timings
    } | {"target_p95_ms": TARGET_P95_MS}
