from __future__ import annotations

import time

import pytest

from config.health import HEARTBEAT_KEY, redis_client, worker_heartbeat_record

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_heartbeat():
    redis_client().delete(HEARTBEAT_KEY)
    yield
    redis_client().delete(HEARTBEAT_KEY)


def test_it_is_healthy_with_a_recent_worker_heartbeat(client):
    worker_heartbeat_record()

    response = client.get("/healthz")

    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["checks"]["database"] == {"ok": True}
    assert body["checks"]["redis"] == {"ok": True}
    assert body["checks"]["worker"]["ok"] is True
    assert body["checks"]["worker"]["age_seconds"] < 5


def test_it_is_unhealthy_before_any_heartbeat(client):
    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["checks"]["worker"]["error"] == "no heartbeat yet"


def test_it_is_unhealthy_when_the_heartbeat_is_too_old(client, settings):
    worker_heartbeat_record(now=time.time() - settings.WORKER_HEARTBEAT_MAX_AGE_SECONDS - 5)

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["checks"]["worker"]["error"] == "heartbeat too old"


def test_it_is_unhealthy_when_redis_is_unreachable(client, redis_unreachable):
    response = client.get("/healthz")

    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["redis"]["ok"] is False
    assert checks["worker"]["ok"] is False
    assert checks["database"]["ok"] is True
