"""A real Celery worker (solo pool, in a thread) against the test run's real Redis."""

from __future__ import annotations

import time

import pytest

from config.health import HEARTBEAT_KEY, redis_client
from config.tasks import worker_heartbeat

pytestmark = pytest.mark.celery_worker


def test_a_task_round_trips_through_redis_and_the_worker(celery_worker):
    from celery.contrib.testing.tasks import ping

    assert ping.delay().get(timeout=10) == "pong"


def test_the_worker_records_its_heartbeat(celery_worker):
    client = redis_client()
    client.delete(HEARTBEAT_KEY)

    worker_heartbeat.delay()

    deadline = time.monotonic() + 10
    while client.get(HEARTBEAT_KEY) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    recorded = client.get(HEARTBEAT_KEY)
    assert recorded is not None
    assert time.time() - float(recorded) < 10
