"""Probes for orchestrators, apart from ``/healthz`` (which is for people).

``/livez``: the process answers. It touches nothing else, so a restart can only be triggered by
the process itself being stuck; a database outage or a failing background job (which make
``/healthz`` 503) must not make an orchestrator restart healthy web processes.

``/readyz``: this process can serve requests now: the database answers, Redis answers, and the
database has every migration this code knows. A load balancer takes a process out of rotation
while it is 503 (during an outage, or a deploy whose ``migrate`` has not run yet) and puts it
back when it is 200, with no restart.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from config.health import check_database, check_redis

# Set once every migration was found applied: a database does not lose migrations while the
# code that knows them runs, and reading the migration graph costs milliseconds on every probe.
_migrations_applied = False


def check_migrations() -> dict[str, Any]:
    global _migrations_applied
    if _migrations_applied:
        return {"ok": True}
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        return {"ok": False, "error": type(exc).__name__}
    if plan:
        unapplied = [f"{migration.app_label}.{migration.name}" for migration, _ in plan]
        return {"ok": False, "error": "migrations not applied", "unapplied": unapplied[:20]}
    _migrations_applied = True
    return {"ok": True}


def migrations_check_forget() -> None:
    """Check the migrations again on the next probe (tests; after migrating backwards)."""
    global _migrations_applied
    _migrations_applied = False


def readiness_report() -> dict[str, Any]:
    database = check_database()
    migrations = check_migrations() if database["ok"] else {"ok": False, "error": "no database"}
    checks = {"database": database, "redis": check_redis(), "migrations": migrations}
    return {"ok": all(check["ok"] for check in checks.values()), "checks": checks}


@never_cache
@require_GET
def livez(request: HttpRequest) -> JsonResponse:
    """200 while the process answers; nothing else is consulted."""
    return JsonResponse({"ok": True})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when the database and Redis answer and every migration is applied, else 503."""
    report = readiness_report()
    return JsonResponse(report, status=200 if report["ok"] else 503)
