"""Read replicas (config/routers.py): where lag-tolerant reads go, read-your-writes, and a real
streaming replica of the test PostgreSQL (config/replica.py) serving searches.

The rules are tested against a second alias; the real replica is started from the test
database's server with pg_basebackup, so these tests use ``transactional_db``: the replica only
ever sees committed rows, and the rules keep a transaction's reads on the primary anyway.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from config.replica import replica_caught_up, replica_start, replica_stop
from config.routers import (
    ReadYourWritesMiddleware,
    ReplicaRouter,
    lag_tolerant,
    read_connection,
)
from ledger.models import Agent, ApiKey, Event, IdempotencyRecord, RecallSettings, Role, Tenant

ALIAS = "replica_1"


@contextlib.contextmanager
def database_alias(alias: str, *, connect: bool = True, **changes: Any) -> Iterator[str]:
    """``alias`` in ``connections`` for the block: the test database with ``changes``.

    Connected on the way in: Django's test cases refuse to open a connection for an alias they
    were not told of, and an alias made during a test cannot be declared beforehand."""
    base = {
        key: value
        for key, value in connections[DEFAULT_DB_ALIAS].settings_dict.items()
        if key != "TEST"
    }
    configured = connections.configure_settings(
        {DEFAULT_DB_ALIAS: connections.settings[DEFAULT_DB_ALIAS], alias: {**base, **changes}}
    )
    connections.settings[alias] = configured[alias]
    if connect:
        connections[alias].connect()
    try:
        yield alias
    finally:
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]


@pytest.fixture
def second_alias(transactional_db: None) -> Iterator[str]:
    """A "replica" that is the primary under another alias: enough for the routing rules.

    Added after the test database is set up, so Django's guard against undeclared aliases
    (which wraps the aliases present at that moment) leaves it alone."""
    with database_alias(ALIAS) as alias:
        yield alias


def served(request_headers: dict[str, str], act: Any) -> HttpResponse:
    """Run ``act`` as the view of a request with these headers, through the middleware."""
    request = RequestFactory().post("/api/v1/anything/", headers=request_headers)

    def view(_: HttpRequest) -> HttpResponse:
        act()
        return HttpResponse(status=201)

    return ReadYourWritesMiddleware(view)(request)  # type: ignore[return-value]


def chosen(headers: dict[str, str]) -> str:
    where: list[str] = []

    def read() -> None:
        with lag_tolerant() as alias:
            where.append(alias)

    served(headers, read)
    return where[0]


def test_without_replicas_every_read_goes_to_the_primary():
    with lag_tolerant() as alias:
        assert alias == DEFAULT_DB_ALIAS
        assert read_connection.alias == DEFAULT_DB_ALIAS
    assert ReplicaRouter().db_for_read(Agent) is None


def test_lag_tolerant_reads_go_to_a_replica_and_others_to_the_primary(second_alias, tenant):
    with lag_tolerant() as alias:
        assert alias == second_alias
        assert read_connection.alias == second_alias
        assert Tenant.objects.all().db == second_alias
        with lag_tolerant() as inner:  # a nested block keeps the outer one's choice
            assert inner == second_alias
        # Writes go to the primary whatever the block chose.
        assert ReplicaRouter().db_for_write(Tenant) == DEFAULT_DB_ALIAS
    assert Tenant.objects.all().db == DEFAULT_DB_ALIAS
    assert read_connection.alias == DEFAULT_DB_ALIAS
    assert ReplicaRouter().allow_migrate(second_alias, "ledger") is False


def test_reads_inside_a_task_s_transaction_stay_on_the_primary(second_alias):
    with transaction.atomic(), lag_tolerant() as alias:
        assert alias == DEFAULT_DB_ALIAS


def test_an_unreachable_replica_is_passed_over_for_the_primary(django_db_blocker):
    with (
        django_db_blocker.unblock(),
        database_alias(ALIAS, connect=False, PORT="1"),
        lag_tolerant() as alias,
    ):
        assert alias == DEFAULT_DB_ALIAS


def test_a_caller_that_wrote_reads_from_the_primary_for_a_few_seconds(second_alias, settings):
    settings.REPLICA_STICKY_SECONDS = 1
    writer = {"Authorization": f"Bearer {uuid.uuid4().hex}"}
    other = {"Authorization": f"Bearer {uuid.uuid4().hex}"}

    served(writer, lambda: ReplicaRouter().db_for_write(Event))  # an append to the ledger

    assert chosen(writer) == DEFAULT_DB_ALIAS
    assert chosen(other) == second_alias
    time.sleep(1.2)
    assert chosen(writer) == second_alias


def test_a_request_reads_its_own_writes_and_bookkeeping_pins_nobody(second_alias):
    caller = {"Authorization": f"Bearer {uuid.uuid4().hex}"}
    where: list[str] = []

    def bookkeeping_then_write() -> None:
        with transaction.atomic():  # as every API request runs
            for model in (IdempotencyRecord, ApiKey, RecallSettings):
                ReplicaRouter().db_for_write(model)
            with lag_tolerant() as alias:
                where.append(alias)
            ReplicaRouter().db_for_write(Event)
            with lag_tolerant() as alias:
                where.append(alias)

    served(caller, bookkeeping_then_write)

    assert where == [second_alias, DEFAULT_DB_ALIAS]


def test_replica_urls_become_aliases_that_mirror_the_primary_in_tests(monkeypatch):
    monkeypatch.setenv("DATABASE_REPLICA_URLS", "postgres://u:p@%2Fsrv%2Fpg:5433/d,postgres://h/d")
    import importlib

    import config.settings

    try:
        reloaded = importlib.reload(config.settings)
        replica = reloaded.DATABASES["replica_1"]
        assert (replica["HOST"], replica["PORT"], replica["NAME"]) == ("/srv/pg", 5433, "d")
        assert replica["TEST"] == {"MIRROR": "default"}
        assert set(reloaded.DATABASES) == {"default", "replica_1", "replica_2"}
    finally:
        monkeypatch.delenv("DATABASE_REPLICA_URLS")
        importlib.reload(config.settings)


# --- A real streaming replica ------------------------------------------------------------------


@pytest.fixture
def streaming_replica(transactional_db: None) -> Iterator[Any]:
    replica = replica_start(settings.EMBEDDED, port=5499)
    try:
        with database_alias(ALIAS, PORT=str(replica.port)):
            yield replica
    finally:
        replica_stop(replica)


def _search(client: Any, agent: str, word: str) -> list[str]:
    # Sent with an Idempotency-Key, as agents retrying safely do: its record must pin nobody.
    response = client.post(
        "/api/v1/memories/search/",
        {"agent": agent, "query": word, "top_k": 5, "sources": ["agent_memory"]},
        format="json",
        HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()),
    )
    assert response.status_code == 200, response.content
    return [hit["content"] for hit in response.json()["results"]]


def test_searches_run_on_the_replica_and_the_writer_reads_its_own_writes(
    streaming_replica, api_as, make_agent
):
    tenant = Tenant.objects.create(name="r", slug=f"r-{uuid.uuid4().hex[:8]}")
    make_agent(tenant, "Reader1")
    writer, reader = api_as(tenant, Role.ADMIN), api_as(tenant, Role.ADMIN)
    replica_caught_up(streaming_replica)
    with lag_tolerant() as alias, read_connection.cursor() as cursor:
        cursor.execute("SELECT pg_is_in_recovery()")
        assert (alias, cursor.fetchone()[0]) == (ALIAS, True)

    # The replica stops replaying: from now on it lags the primary by whatever is written.
    standby = psycopg_superuser(streaming_replica)
    standby.execute("SELECT pg_wal_replay_pause()")
    while standby.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()[0] != "paused":
        time.sleep(0.02)
    word = f"zq{uuid.uuid4().hex[:10]}"
    stored = writer.post(
        "/api/v1/memories/", {"agent": "Reader1", "content": f"the {word} note"}, format="json"
    )
    assert stored.status_code == 201, stored.content

    assert _search(writer, "Reader1", word) == [f"the {word} note"]  # pinned to the primary
    assert _search(reader, "Reader1", word) == []  # the lagging replica answered

    standby.execute("SELECT pg_wal_replay_resume()")
    replica_caught_up(streaming_replica)
    assert _search(reader, "Reader1", word) == [f"the {word} note"]
    standby.close()


def psycopg_superuser(replica: Any) -> Any:
    import psycopg

    from config.embedded import SUPERUSER

    kwargs = {**replica.layout.connect_kwargs(SUPERUSER, "postgres"), "port": replica.port}
    return psycopg.connect(**kwargs, autocommit=True)
