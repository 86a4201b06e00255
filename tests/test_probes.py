"""/livez (the process answers) and /readyz (database, Redis, migrations), apart from /healthz."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from config.health import HEARTBEAT_KEY, redis_client, worker_heartbeat_record
from config.probes import migrations_check_forget
from ledger.jobs import job_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _migrations_checked_afresh() -> Iterator[None]:
    migrations_check_forget()
    yield
    migrations_check_forget()


def test_livez_answers_without_touching_the_database_or_redis(
    client, django_assert_num_queries, redis_unreachable
):
    with django_assert_num_queries(0):
        response = client.get("/livez")

    assert response.status_code == 200
    assert response.json() == {"ok": True}
    assert response["Cache-Control"].startswith("max-age=0")


def test_readyz_is_ready_with_the_database_redis_and_every_migration(client):
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {
        "ok": True,
        "checks": {"database": {"ok": True}, "redis": {"ok": True}, "migrations": {"ok": True}},
    }


def test_readyz_is_not_ready_while_redis_is_unreachable(client, redis_unreachable):
    response = client.get("/readyz")

    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["redis"]["ok"] is False
    assert checks["database"] == {"ok": True}
    assert checks["migrations"] == {"ok": True}


def test_readyz_is_not_ready_while_a_migration_is_unapplied(client):
    # As after deploying code whose migration has not run yet; rolled back with the test.
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_migrations WHERE id = "
            "(SELECT max(id) FROM django_migrations WHERE app = 'memory') RETURNING name"
        )
        (name,) = cursor.fetchone()

    response = client.get("/readyz")

    assert response.status_code == 503
    migrations = response.json()["checks"]["migrations"]
    assert migrations["error"] == "migrations not applied"
    assert f"memory.{name}" in migrations["unapplied"]


def test_readyz_checks_migrations_again_until_they_are_all_applied(client):
    with connection.cursor() as cursor:
        cursor.execute("SAVEPOINT before_delete")
        cursor.execute(
            "DELETE FROM django_migrations WHERE id = "
            "(SELECT max(id) FROM django_migrations WHERE app = 'trust')"
        )
    assert client.get("/readyz").status_code == 503

    with connection.cursor() as cursor:
        cursor.execute("ROLLBACK TO SAVEPOINT before_delete")

    assert client.get("/readyz").status_code == 200


def test_a_failing_job_fails_healthz_but_neither_livez_nor_readyz(client):
    def failing():
        raise RuntimeError("down")
        yield  # pragma: no cover (makes this a generator)

    worker_heartbeat_record()
    try:
        for _ in range(3):
            with pytest.raises(RuntimeError):
                job_run(name="trust.regret_inference", batches=failing)

        assert client.get("/healthz").status_code == 503
        assert client.get("/livez").status_code == 200
        assert client.get("/readyz").status_code == 200
    finally:
        redis_client().delete(HEARTBEAT_KEY)
