"""Liveness of the service's dependencies, as reported by /healthz."""

from __future__ import annotations

import time
from typing import Any

import redis
from django.conf import settings
from django.db import connection

from config.version import VERSION

HEARTBEAT_KEY = "agent-memory:worker-heartbeat"


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)


def worker_heartbeat_record(*, now: float | None = None) -> None:
    client = redis_client()
    try:
        client.set(HEARTBEAT_KEY, str(time.time() if now is None else now))
    finally:
        client.close()


def check_database() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True}
    except Exception as exc:  # any failure means "unhealthy", whatever the driver raised
        return {"ok": False, "error": type(exc).__name__}


def check_redis() -> dict[str, Any]:
    client = redis_client()
    try:
        client.ping()
    except redis.RedisError as exc:
        return {"ok": False, "error": type(exc).__name__}
    finally:
        client.close()
    return {"ok": True}


def _check_redis_and_worker() -> tuple[dict[str, Any], dict[str, Any]]:
    client = redis_client()
    try:
        client.ping()
        raw = client.get(HEARTBEAT_KEY)
    except redis.RedisError as exc:
        failure = {"ok": False, "error": type(exc).__name__}
        return failure, {"ok": False, "error": "redis unavailable"}
    finally:
        client.close()
    if raw is None:
        return {"ok": True}, {"ok": False, "error": "no heartbeat yet", "age_seconds": None}
    age = max(0.0, time.time() - float(raw))
    healthy = age <= settings.WORKER_HEARTBEAT_MAX_AGE_SECONDS
    worker: dict[str, Any] = {"ok": healthy, "age_seconds": round(age, 1)}
    if not healthy:
        worker["error"] = "heartbeat too old"
    return {"ok": True}, worker


def _check_jobs(database_ok: bool) -> dict[str, Any]:
    """Unhealthy when a background job failed (or died) in each of its last three runs."""
    if not database_ok:
        return {"ok": False, "error": "database unavailable"}
    from ledger.jobs import jobs_failing

    try:
        failing = jobs_failing()
    except Exception as exc:  # e.g. not migrated yet: unhealthy, with the reason
        return {"ok": False, "error": type(exc).__name__}
    if failing:
        return {"ok": False, "error": "failed its last 3 runs", "failing": failing}
    return {"ok": True}


def health_report() -> dict[str, Any]:
    redis_state, worker_state = _check_redis_and_worker()
    database_state = check_database()
    checks = {
        "database": database_state,
        "redis": redis_state,
        "worker": worker_state,
        "jobs": _check_jobs(database_state["ok"]),
    }
    return {
        "ok": all(check["ok"] for check in checks.values()),
        "version": VERSION,
        "checks": checks,
    }
