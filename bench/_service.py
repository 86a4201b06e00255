"""The real service for benchmarks that go through HTTP: a private data folder, its embedded
PostgreSQL and Redis, migrations, and gunicorn serving ``config.wsgi`` on a free local port.

    with service_stack(ROOT / "var" / "bench-x", workers=1) as stack:
        api = stack.client(stack.admin_key())
        status, body, ms = api.post("/api/v1/agents/", {"name": "a"})

Everything started here is stopped when the block ends, whatever happens inside it; the data
folder is deleted too unless ``keep`` is set (disk is limited on the bench machines).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _setup import ROOT, django_setup

SERVER_START_TIMEOUT_SECONDS = 60.0


@dataclass
class ApiClient:
    """JSON over one kept-alive HTTP/1.1 connection; each call returns (status, body, ms).

    The time is the client's view of the round trip: send, server work, receive and parse.
    """

    host: str
    port: int
    key: str
    timeout: float = 300.0

    def __post_init__(self) -> None:
        self._connection: http.client.HTTPConnection | None = None

    def _open(self) -> http.client.HTTPConnection:
        if self._connection is None:
            self._connection = http.client.HTTPConnection(
                self.host, self.port, timeout=self.timeout
            )
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any, float]:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}
        for attempt in range(2):
            connection = self._open()
            started = time.perf_counter()
            try:
                connection.request(method, path, body=payload, headers=headers)
                response = connection.getresponse()
                raw = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # The server closed an idle kept-alive connection: reconnect and time the retry.
                self.close()
                if attempt:
                    raise
                continue
            answer = json.loads(raw) if raw else None
            elapsed = (time.perf_counter() - started) * 1000
            if response.getheader("Connection", "").lower() == "close":
                self.close()
            return response.status, answer, elapsed
        raise AssertionError("unreachable")

    def post(self, path: str, body: Any) -> tuple[int, Any, float]:
        return self.request("POST", path, body)

    def get(self, path: str) -> tuple[int, Any, float]:
        return self.request("GET", path)


@dataclass
class Stack:
    data_dir: Path
    port: int
    workers: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, key: str) -> ApiClient:
        return ApiClient("127.0.0.1", self.port, key)

    def admin_key(self, *, slug: str = "bench") -> str:
        """A fresh tenant and an admin API key for it, made through the services."""
        return self.tenant_with_admin_key(slug=slug)[1]

    def admin_key_for(self, tenant: Any) -> str:
        from ledger.models import Role
        from ledger.services import api_key_create

        _, raw = api_key_create(tenant=tenant, name="bench", role=Role.ADMIN, actor="system")
        return raw

    def tenant_with_admin_key(self, *, slug: str = "bench") -> tuple[Any, str]:
        from ledger.services import tenant_create

        tenant = tenant_create(name=slug, slug=f"{slug}-{uuid.uuid4().hex[:8]}")
        return tenant, self.admin_key_for(tenant)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _gunicorn_command(port: int, workers: int, control_socket: Path) -> list[str]:
    command = [
        sys.executable, "-m", "gunicorn", "config.wsgi:application",
        "--bind", f"127.0.0.1:{port}",
        "--workers", str(workers),
        "--worker-class", "gthread",
        "--threads", os.environ.get("WEB_THREADS", "8"),
        "--timeout", "600",
        "--graceful-timeout", "10",
    ]  # fmt: skip
    from gunicorn.config import KNOWN_SETTINGS

    # gunicorn 25+ has a control socket, by default one per user: keep ours in the data folder
    # so this server never takes it from another one running on the machine (as `up` does).
    if any(setting.name == "control_socket" for setting in KNOWN_SETTINGS):
        command += ["--control-socket", str(control_socket)]
    return command


def _wait_until_answering(stack: Stack, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise RuntimeError(f"gunicorn exited with {process.returncode}:\n{tail}")
        with contextlib.suppress(OSError):
            probe = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=5)
            try:
                probe.request("GET", "/healthz")
                probe.getresponse().read()  # 200 or 503 (no Celery worker): either way it answers
                return
            finally:
                probe.close()
        time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not answer on {stack.base_url}; see {log}")


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)  # the master stops its workers gracefully
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def service_stack(
    data_dir: Path, *, workers: int = 1, http: bool = True, keep: bool = False
) -> Iterator[Stack]:
    """The embedded PostgreSQL + Redis of ``data_dir`` (migrated), Django set up in this process
    on the same database, and gunicorn when ``http``; all stopped afterwards."""
    data_dir = data_dir.resolve()
    if not data_dir.is_relative_to(ROOT / "var"):
        raise ValueError(f"bench data folders live under {ROOT / 'var'}, not {data_dir}")
    # A private stack: never a database or Redis configured for something else.
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    stack = Stack(data_dir=data_dir, port=free_port() if http else 0, workers=workers)
    process: subprocess.Popen[bytes] | None = None
    try:
        django_setup(data_dir)
        from django.conf import settings

        if http:
            log_dir = settings.EMBEDDED.log_dir
            log_dir.mkdir(parents=True, exist_ok=True)
            log = log_dir / "gunicorn.log"
            settings.EMBEDDED.socket_dir.mkdir(parents=True, exist_ok=True)
            command = _gunicorn_command(
                stack.port, workers, settings.EMBEDDED.socket_dir / "gunicorn.ctl"
            )
            env = {
                **os.environ,
                "AGENT_MEMORY_DATA_DIR": str(data_dir),
                "DJANGO_SETTINGS_MODULE": "config.settings",
                "LOG_LEVEL": os.environ.get("LOG_LEVEL", "WARNING"),
                # A benchmark is one key asking as fast as it can: the limiter still counts every
                # request (its cost is in the figures) but must not refuse them.
                "API_RATE_LIMIT": os.environ.get("API_RATE_LIMIT", "100000000"),
            }
            with open(log, "ab") as output:
                process = subprocess.Popen(
                    command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT
                )
            _wait_until_answering(stack, process, log)
        yield stack
    finally:
        if process is not None:
            _stop_process(process)
        _stop_embedded_services()
        if not keep:
            shutil.rmtree(data_dir, ignore_errors=True)


def _stop_embedded_services() -> None:
    from django.conf import settings

    if not settings.configured:
        return
    from django.db import connections

    from config import embedded, embedded_redis

    connections.close_all()
    embedded_redis.redis_stop(settings.EMBEDDED)
    embedded.postgres_stop(settings.EMBEDDED)


# --- Celery worker ------------------------------------------------------------------------------


def start_worker(stack: Stack) -> subprocess.Popen[bytes]:
    """A Celery worker on the stack's database and Redis, one pool process, as ``make up`` runs
    it (its pool niced by ``WORKER_NICENESS``)."""
    log = stack.data_dir / "logs" / "celery-worker.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AGENT_MEMORY_DATA_DIR": str(stack.data_dir), "LOG_LEVEL": "WARNING"}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    with open(log, "ab") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--loglevel", "WARNING",
             "--concurrency", "1", "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip


@contextlib.contextmanager
def celery_worker(stack: Stack) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Workers started in the block (one, plus any the caller appends), stopped after it."""
    processes = [start_worker(stack)]
    try:
        yield processes
    finally:
        for process in processes:
            _stop_process(process)


def background_drained(timeout: float = 600.0) -> float:
    """Wait until the broker's queue is empty and no worker runs a task; the seconds waited.

    What the service queued (a batch's consolidation, the ledger events' embeddings) is part of
    what an ingest costs; a benchmark reports when it was done, not only when the store answered.
    """
    from config.celery import app
    from config.health import redis_client
    from config.metrics import CELERY_QUEUES

    started = time.perf_counter()
    inspector = app.control.inspect(timeout=1.0)
    client = redis_client()
    try:
        while time.perf_counter() - started < timeout:
            if not any(client.llen(queue) for queue in CELERY_QUEUES):
                active = inspector.active() or {}
                reserved = inspector.reserved() or {}
                if active and not any([*active.values(), *reserved.values()]):
                    return time.perf_counter() - started
            time.sleep(0.5)
    finally:
        client.close()
    raise TimeoutError(f"the Celery queue was not drained within {timeout:.0f} s")
