"""Prometheus metrics: what the service does, in every web and worker process, at ``/metrics``.

prometheus_client's multiprocess mode: each process (gunicorn workers, Celery pool children)
writes its series to files of its own in ``METRICS_DIR`` (``PROMETHEUS_MULTIPROC_DIR``), and the
scrape sums them all. So one scrape of any web process also shows the workers' task series when
they share the folder (``make up``, or one volume under compose). ``up`` empties the folder at
start; the library chooses between files and memory when first imported, so this module sets the
variable before importing it.

Labels are bounded by the code, never by clients: a route is the URL pattern that matched (not
the path), a method outside the known few is ``other``, a task is its registered name, a plan or a
reason is one of the code's constants.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache, partial, wraps
from pathlib import Path
from typing import ParamSpec

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

# Before the first import of prometheus_client anywhere in the process (see the docstring).
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(settings.METRICS_DIR))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)

from prometheus_client import (  # noqa: E402
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client import values as prometheus_values  # noqa: E402
from prometheus_client.core import GaugeMetricFamily  # noqa: E402

from config.api import error_response  # noqa: E402

# Files are named by process; the host name joins the pid because containers sharing the folder
# (compose's web and worker on one volume) reuse the same small pids, and two processes writing
# one file corrupt it.
_HOST = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())


def _process_identifier() -> str:
    return f"{_HOST}-{os.getpid()}"


prometheus_values.ValueClass = prometheus_values.MultiProcessValue(_process_identifier)  # type: ignore[no-untyped-call]

HTTP_REQUESTS = Counter(
    "agent_memory_http_requests_total",
    "Requests answered, by route (the URL pattern), method and status code.",
    ["route", "method", "status"],
)
HTTP_REQUEST_SECONDS = Histogram(
    "agent_memory_http_request_duration_seconds",
    "Time from the first middleware to the response, by route and method.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
SEARCH_SECONDS = Histogram(
    "agent_memory_search_duration_seconds",
    "memories_search, by the semantic leg's plan (index, sketch, scan; keyword when the query "
    "has no vector; none when agent memories were not searched).",
    ["plan"],
    buckets=(0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5),
)
EMBEDDER_SECONDS = Histogram(
    "agent_memory_embedder_duration_seconds",
    "One call of the embedder, by backend and outcome (ok or unavailable).",
    ["backend", "outcome"],
    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)
EMBEDDER_IN_FLIGHT = Gauge(
    "agent_memory_embedder_in_flight",
    "Embedder calls waiting or running now, summed over live processes: its queue depth.",
    multiprocess_mode="livesum",
)
CELERY_TASKS = Counter(
    "agent_memory_celery_tasks_total",
    "Celery task runs finished, by task and state (SUCCESS, FAILURE, RETRY...).",
    ["task", "state"],
)
CELERY_TASK_SECONDS = Histogram(
    "agent_memory_celery_task_duration_seconds",
    "Celery task run time, by task.",
    ["task"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
)
LEDGER_EVENTS_APPENDED = Counter(
    "agent_memory_ledger_events_appended_total",
    "Ledger events committed (an append that rolled back is not counted).",
)
LEDGER_APPENDS = Counter(
    "agent_memory_ledger_appends_total",
    "Committed ledger appends (one append writes one or more events).",
)
TRUST_RECOMPUTES = Counter(
    "agent_memory_trust_recomputes_total", "trust_recompute calls, by reason.", ["reason"]
)
TRUST_SCORES_CHANGED = Counter(
    "agent_memory_trust_scores_changed_total",
    "Trust scores a recompute changed, by reason.",
    ["reason"],
)

P = ParamSpec("P")
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED_ROUTE = "<unmatched>"
# The Celery queues whose backlog a scrape reports (the default queue is all that is used).
CELERY_QUEUES = ("celery",)


# --- Requests -----------------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def route_label(route: str) -> str:
    """The matched pattern, without the anchors DRF's routers put inside it."""
    return route.replace("^", "").replace("$", "")


class RequestMetricsMiddleware:
    """Counts and times every request by its route. Outermost, so the time includes the rest."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed = time.perf_counter() - started
        match = request.resolver_match
        route = route_label(match.route) if match is not None and match.route else UNMATCHED_ROUTE
        method = request.method if request.method in KNOWN_METHODS else "other"
        HTTP_REQUESTS.labels(route, method, str(response.status_code)).inc()
        HTTP_REQUEST_SECONDS.labels(route, method).observe(elapsed)
        return response


# --- Search and embeddings -----------------------------------------------------------------------

# The plan the current search's memory leg chose, noted where it is chosen, read when it ends.
_search_plan: ContextVar[str] = ContextVar("search_plan", default="none")


def search_plan_note(plan: str) -> None:
    _search_plan.set(plan)


def search_observe(seconds: float) -> None:
    SEARCH_SECONDS.labels(_search_plan.get()).observe(seconds)
    _search_plan.set("none")


@contextmanager
def embedder_timed(backend: str) -> Iterator[None]:
    EMBEDDER_IN_FLIGHT.inc()
    started = time.perf_counter()
    outcome = "unavailable"
    try:
        yield
        outcome = "ok"
    finally:
        EMBEDDER_SECONDS.labels(backend, outcome).observe(time.perf_counter() - started)
        EMBEDDER_IN_FLIGHT.dec()


# --- Ledger and trust ----------------------------------------------------------------------------


def ledger_appended(events: int) -> None:
    """Called on commit of an append of ``events`` events."""
    LEDGER_APPENDS.inc()
    LEDGER_EVENTS_APPENDED.inc(events)


def trust_recomputed(*, reason: str, changed: int) -> None:
    TRUST_RECOMPUTES.labels(reason).inc()
    if changed:
        TRUST_SCORES_CHANGED.labels(reason).inc(changed)


def trust_recompute_counted(recompute: Callable[P, int]) -> Callable[P, int]:
    """Counts each ``trust_recompute`` (reason, scores changed) once its transaction commits."""

    @wraps(recompute)
    def counted(*args: P.args, **kwargs: P.kwargs) -> int:
        changed = recompute(*args, **kwargs)
        reason = str(kwargs.get("reason", "?"))
        transaction.on_commit(partial(trust_recomputed, reason=reason, changed=changed))
        return changed

    return counted


# --- Celery --------------------------------------------------------------------------------------

# task id -> when it started, in this worker process (a task runs in one process, start to end).
_task_started: dict[str, float] = {}


def celery_task_started(task_id: str) -> None:
    _task_started[task_id] = time.perf_counter()


def celery_task_finished(*, task_id: str, task_name: str, state: str) -> None:
    started = _task_started.pop(task_id, None)
    CELERY_TASKS.labels(task_name, state or "UNKNOWN").inc()
    if started is not None:
        CELERY_TASK_SECONDS.labels(task_name).observe(time.perf_counter() - started)


class CeleryQueueCollector:
    """The broker's backlog per queue, read from Redis when scraped (not per process)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from config.health import redis_client

        family = GaugeMetricFamily(
            "agent_memory_celery_queue_length",
            "Tasks waiting in the broker, by queue (absent while Redis is unreachable).",
            labels=["queue"],
        )
        client = redis_client()
        try:
            for queue in CELERY_QUEUES:
                family.add_metric([queue], float(client.llen(queue)))
        except Exception:  # noqa: S110 (a scrape must still answer; the series is left out)
            pass
        finally:
            client.close()
        yield family


# --- The endpoint --------------------------------------------------------------------------------


def metrics_dir_reset() -> None:
    """Empty the metrics folder; ``up`` does it before starting its children, so the figures
    start from zero with the service rather than summing every earlier run."""
    for path in Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).glob("*.db"):
        path.unlink(missing_ok=True)


def metrics_access_allowed(request: HttpRequest) -> bool:
    """``METRICS_TOKEN`` as a bearer token, or a client address in ``METRICS_ALLOWED_ADDRESSES``.

    The address is ``REMOTE_ADDR``, or the client behind ``TRUSTED_PROXY_COUNT`` proxies of ours.
    A request carrying ``X-Forwarded-For`` while no proxy is trusted came through a proxy we were
    not told of, which on this machine would make every outside client look like loopback: it
    must bring the token.
    """
    token = settings.METRICS_TOKEN
    if token:
        sent = str(request.META.get("HTTP_AUTHORIZATION") or "")
        if secrets.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            return True
    if settings.TRUSTED_PROXY_COUNT == 0 and "HTTP_X_FORWARDED_FOR" in request.META:
        return False
    from config.ratelimit import address_host, client_ip

    try:
        address = ipaddress.ip_address(address_host(client_ip(request)))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in settings.METRICS_ALLOWED_NETWORKS)


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not metrics_access_allowed(request):
        return error_response(
            "metrics_forbidden",
            "Metrics are served to the addresses in METRICS_ALLOWED_ADDRESSES, or with "
            "'Authorization: Bearer <METRICS_TOKEN>'.",
            403,
        )
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    registry.register(CeleryQueueCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
