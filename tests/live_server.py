"""A real gunicorn server (the production server's worker class) on this run's test database.

    with live_server() as server:
        status, headers, body = server.request("GET", "/api/v1/agents/", key=raw_key)

Tests that use it must commit their rows (``transactional_db``): the server reads through its own
connections. It is stopped when the block ends, before pytest-django drops the test database.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class LiveServer:
    port: int

    def request(
        self,
        method: str,
        path: str,
        *,
        key: str | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> tuple[int, dict[str, str], Any]:
        """One request on a fresh connection: (status, headers with lower-case names, JSON)."""
        sent = {"Content-Type": "application/json", **(headers or {})}
        if key:
            sent["Authorization"] = f"Bearer {key}"
        client = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            client.request(
                method, path, body=None if body is None else json.dumps(body), headers=sent
            )
            response = client.getresponse()
            raw = response.read()
            answer_headers = {name.lower(): value for name, value in response.getheaders()}
        finally:
            client.close()
        parsed: Any = raw.decode(errors="replace")
        if answer_headers.get("content-type", "").startswith("application/json"):
            parsed = json.loads(raw)
        return response.status, answer_headers, parsed


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_answering(server: LiveServer, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}; see {log}")
        with contextlib.suppress(OSError):
            server.request("GET", "/api/v1/agents/", timeout=5)  # 401 without a key: it answers
            return
        time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not answer on port {server.port}; see {log}")


@contextlib.contextmanager
def live_server(*, workers: int = 1, env: dict[str, str] | None = None) -> Iterator[LiveServer]:
    server = LiveServer(port=_free_port())
    log_dir = settings.EMBEDDED.log_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"live-gunicorn-{server.port}.log"
    process_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.live_settings",
        "AGENT_MEMORY_DATA_DIR": str(settings.DATA_DIR),
        "AGENT_MEMORY_SERVER_DB_NAME": str(connection.settings_dict["NAME"]),
        "LOG_LEVEL": "WARNING",
        **(env or {}),
    }
    command = [
        sys.executable, "-m", "gunicorn", "config.wsgi:application",
        "--bind", f"127.0.0.1:{server.port}", "--workers", str(workers),
        "--worker-class", "gthread", "--threads", "4",
        "--timeout", "120", "--graceful-timeout", "5",
        "--control-socket", str(settings.EMBEDDED.socket_dir / f"live-{server.port}.ctl"),
    ]  # fmt: skip
    with open(log, "ab") as output:
        process = subprocess.Popen(command, cwd=ROOT, env=process_env, stdout=output, stderr=output)
    try:
        _wait_until_answering(server, process, log)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def log_text(server: LiveServer) -> str:
    path = settings.EMBEDDED.log_dir / f"live-gunicorn-{server.port}.log"
    return path.read_text(errors="replace") if path.exists() else ""
