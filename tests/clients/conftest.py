"""The real service for client and MCP tests: gunicorn serving ``config.wsgi`` on a loopback port,
on this run's test database and Redis, started once per run and stopped before the test database
is dropped. Each test gets a tenant of its own with committed rows (``transactional_db``), so the
server's own connections see them; they are flushed after the test.
"""

from __future__ import annotations

import contextlib
import http.client
import os
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

import pytest
from agent_memory_client import Client, RetryPolicy
from django.conf import settings

from ledger import services
from ledger.models import Role

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class Service:
    base_url: str
    port: int


@dataclass(frozen=True)
class TenantKeys:
    """A fresh tenant: its slug, an admin key and a reviewer key (raw secrets)."""

    slug: str
    admin: str
    reviewer: str
    base_url: str

    def client(self, key: str | None = None, **options: Any) -> Client:
        options.setdefault("retry", RetryPolicy(retries=2, backoff=0.05))
        return Client(base_url=self.base_url, api_key=key or self.admin, **options)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_answering(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}; see {log}")
        with contextlib.suppress(OSError):
            probe = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                probe.request("GET", "/api/v1/agents/")
                probe.getresponse().read()  # 401 without a key: it answers
                return
            finally:
                probe.close()
        time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not answer on port {port}; see {log}")


@pytest.fixture(scope="session")
def service(django_db_setup: None, django_db_blocker: Any) -> Iterator[Service]:
    from django.db import connection

    port = _free_port()
    log_dir = settings.EMBEDDED.log_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "clients-gunicorn.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.clients.server_settings",
        "AGENT_MEMORY_DATA_DIR": str(settings.DATA_DIR),
        "AGENT_MEMORY_SERVER_DB_NAME": str(connection.settings_dict["NAME"]),
        "LOG_LEVEL": "WARNING",
    }
    command = [
        sys.executable, "-m", "gunicorn", "config.wsgi:application",
        "--bind", f"127.0.0.1:{port}", "--workers", "1",
        "--worker-class", "gthread", "--threads", "4",
        "--timeout", "120", "--graceful-timeout", "5",
    ]  # fmt: skip
    from gunicorn.config import KNOWN_SETTINGS

    # gunicorn 25+ keeps a control socket, by default one per user: ours goes in the data folder
    # so this server never takes it from another gunicorn on the machine.
    if any(setting.name == "control_socket" for setting in KNOWN_SETTINGS):
        socket_path = settings.EMBEDDED.socket_dir / f"clients-{port}.ctl"
        command += ["--control-socket", str(socket_path)]
    with open(log, "ab") as output:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=output)
    try:
        _wait_until_answering(port, process, log)
        yield Service(base_url=f"http://127.0.0.1:{port}", port=port)
    finally:
        # Before the test database is dropped: gunicorn's connections would block the DROP.
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def tenant_keys(service: Service, transactional_db: None) -> TenantKeys:
    slug = f"clients-{uuid.uuid4().hex[:10]}"
    tenant = services.tenant_create(name=slug, slug=slug)
    keys = {
        role: services.api_key_create(
            tenant=tenant, name=f"{role} key", role=role, agent=None, actor="system"
        )[1]
        for role in (Role.ADMIN, Role.REVIEWER)
    }
    return TenantKeys(
        slug=slug, admin=keys[Role.ADMIN], reviewer=keys[Role.REVIEWER], base_url=service.base_url
    )


@pytest.fixture
def admin(tenant_keys: TenantKeys) -> Iterator[Client]:
    with tenant_keys.client() as client:
        yield client
