"""Dependency outages against the real server: the embedded PostgreSQL and Redis of this test run
are stopped and started again under a running gunicorn.

While one is down the API answers 503 ``service_unavailable`` with ``Retry-After`` (never a 500 or
a traceback), nothing is written, and within 5 s of it coming back the same server answers again
by itself; a POST retried with its ``Idempotency-Key`` is applied exactly once.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import OperationalError, connections

from config import embedded, embedded_redis
from config.errors import server_error
from ledger import services
from ledger.models import Agent, Role, Tenant
from tests.live_server import LiveServer, live_server, log_text

RECOVERY_LIMIT_SECONDS = 5.0

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(transactional_db: None) -> Iterator[LiveServer]:
    with live_server() as running:
        yield running


@pytest.fixture
def admin_key(transactional_db: None) -> tuple[Tenant, str]:
    slug = f"outage-{uuid.uuid4().hex[:8]}"
    tenant = services.tenant_create(name=slug, slug=slug)
    _, raw = services.api_key_create(
        tenant=tenant, name="admin", role=Role.ADMIN, agent=None, actor="system"
    )
    return tenant, raw


def seconds_until_ok(server: LiveServer, key: str) -> float:
    """Poll the API until it answers 200; how long that took after the dependency was back."""
    started = time.monotonic()
    while time.monotonic() - started < 30:
        status, _, _ = server.request("GET", "/api/v1/agents/", key=key, timeout=10)
        if status == 200:
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError("the API did not recover within 30 s")


def assert_unavailable(answer: tuple[int, dict[str, str], object], dependency: str) -> None:
    status, headers, body = answer
    assert status == 503, body
    assert headers["retry-after"] == "5"
    assert isinstance(body, dict)
    assert body["error"]["code"] == "service_unavailable"
    assert body["error"]["details"]["dependency"] == dependency
    assert "Traceback" not in str(body)


def outage_then_recovery(
    server: LiveServer,
    tenant: Tenant,
    key: str,
    *,
    dependency: str,
    stop: Callable[[], object],
    start: Callable[[], object],
) -> float:
    name = f"Retried-{dependency}"
    create: dict[str, Any] = {
        "key": key,
        "body": {"name": name},
        "headers": {"Idempotency-Key": f"k-{name}"},
    }
    assert server.request("GET", "/api/v1/agents/", key=key)[0] == 200

    stop()
    try:
        assert_unavailable(server.request("GET", "/api/v1/agents/", key=key), dependency)
        assert_unavailable(server.request("POST", "/api/v1/agents/", **create), dependency)
    finally:
        start()
    recovery = seconds_until_ok(server, key)
    print(f"{dependency}: the API answered 200 again {recovery:.2f} s after it was back")

    first = server.request("POST", "/api/v1/agents/", **create)
    replay = server.request("POST", "/api/v1/agents/", **create)
    assert first[0] == 201, first
    assert replay[0] == 201
    assert replay[2] == first[2]
    assert Agent.objects.filter(tenant=tenant, name=name).count() == 1
    assert "Traceback" not in log_text(server)
    return recovery


def _postgres_start(layout: embedded.EmbeddedLayout) -> None:
    embedded.postgres_start(layout)
    # This test process's own connections died with the server too.
    connections.close_all()


OUTAGES = [
    pytest.param(
        "redis",
        embedded_redis.redis_stop,
        embedded_redis.redis_start,
        marks=pytest.mark.skipif(bool(os.environ.get("REDIS_URL")), reason="embedded Redis only"),
        id="redis",
    ),
    pytest.param(
        "database",
        embedded.postgres_stop,
        _postgres_start,
        marks=pytest.mark.skipif(
            bool(os.environ.get("DATABASE_URL")), reason="embedded PostgreSQL only"
        ),
        id="postgres",
    ),
]


@pytest.mark.parametrize(("dependency", "stop", "start"), OUTAGES)
def test_while_a_dependency_is_down_the_api_answers_503_and_recovers_by_itself(
    server, admin_key, dependency, stop, start
):
    tenant, key = admin_key
    layout = settings.EMBEDDED

    recovery = outage_then_recovery(
        server,
        tenant,
        key,
        dependency=dependency,
        stop=lambda: stop(layout),
        start=lambda: start(layout),
    )

    assert recovery <= RECOVERY_LIMIT_SECONDS


def test_a_page_that_fails_on_a_dead_database_gets_the_503_page_not_the_500(rf):
    request = rf.get("/trust/")
    try:
        raise OperationalError("connection to server on socket failed")
    except OperationalError:
        response = server_error(request)

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert b"Temporarily unavailable" in response.content
    assert b"<style" not in response.content  # the CSP allows no inline styles
