"""Test-run wiring: real PostgreSQL (embedded, or DATABASE_URL) and real Redis (embedded, or
REDIS_URL), started once per run under var/test and stopped at the end if this run started them.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import OperationalError
from django.test import Client
from psycopg.errors import DeadlockDetected
from rest_framework.test import APIClient

from config import database, embedded, embedded_redis
from ledger import services
from ledger.models import Agent, ApiKey, Role, Tenant
from memory.embeddings.backends import embedder_reset
from memory.embeddings.local_embedder import DIMENSIONS
from tests.standins import StandIn, openai_standin

_started_here: list[Callable[[embedded.EmbeddedLayout], None]] = []


def pytest_configure(config: pytest.Config) -> None:
    layout = settings.EMBEDDED
    if not os.environ.get("DATABASE_URL") and embedded.postgres_start(layout):
        _started_here.append(embedded.postgres_stop)
    if not os.environ.get("REDIS_URL") and embedded_redis.redis_start(layout):
        _started_here.append(embedded_redis.redis_stop)


def pytest_unconfigure(config: pytest.Config) -> None:
    if os.environ.get("AGENT_MEMORY_KEEP_TEST_SERVICES"):
        return
    for stop in reversed(_started_here):
        stop(settings.EMBEDDED)


# Who the service connects as, before any fixture swaps the connection for the owner's.
SERVICE_CONNECTION = database.connection_fields()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None,
) -> Iterator[None]:
    """The test database is created, migrated and dropped by the owner role, as in production;
    the tests themselves run as the service's role (``django_db_setup`` below)."""
    with database.database_as_owner():
        yield


@pytest.fixture(scope="session")
def django_db_setup(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    from django.db import connection

    # Servers and workers the tests start keep checkpoints of this run's fresh test database
    # apart from those of earlier runs, whose tenant ids repeat.
    os.environ["LEDGER_ANCHOR_DIR"] = str(tmp_path_factory.getbasetemp() / "ledger-anchors-servers")

    if database.database_owner_settings() is not None:
        # The one grant the service's role has here and not in production: MAINTAIN, for the
        # tests that ANALYZE, VACUUM or REINDEX to pin a query plan. It changes no row and no
        # trigger.
        role = embedded.quote_identifier(settings.DATABASE_APP_ROLE)
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(f"GRANT MAINTAIN ON ALL TABLES IN SCHEMA public TO {role}")
    with database.database_connected_as(SERVICE_CONNECTION):
        yield


FLUSH_ATTEMPTS = 3
WORKER_IDLE_WAIT_SECONDS = 30.0


def _worker_wait_idle() -> None:
    """Wait until the in-process Celery worker (``celery_worker``, once a test has started it)
    runs no task: a task still writing rows of a transactional test would deadlock with the
    TRUNCATE that empties the tables after it (seen in CI: an event-embedding task queued by the
    test's last commit against the flush)."""
    from celery.worker import state

    deadline = time.monotonic() + WORKER_IDLE_WAIT_SECONDS
    while state.active_requests and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture(scope="session", autouse=True)
def _flush_as_owner() -> Iterator[None]:
    """Django empties the tables after a transactional test with TRUNCATE, which the service's
    role may not do to the ledger (and its trigger refuses to anyone): the owner does it, with the
    trigger off for that one transaction, so the test database keeps every guard production has.
    """
    from django.db import transaction
    from django.db.backends.postgresql.operations import DatabaseOperations

    def execute_sql_flush(self: DatabaseOperations, sql_list: list[str]) -> None:
        alias = self.connection.alias
        for attempt in range(FLUSH_ATTEMPTS):
            _worker_wait_idle()
            try:
                with (
                    database.database_as_owner(alias),
                    transaction.atomic(using=alias),
                    self.connection.cursor() as cursor,
                ):
                    cursor.execute(
                        "ALTER TABLE ledger_event DISABLE TRIGGER ledger_event_no_truncate"
                    )
                    for statement in sql_list:
                        cursor.execute(statement)
                    cursor.execute(
                        "ALTER TABLE ledger_event ENABLE TRIGGER ledger_event_no_truncate"
                    )
                return
            except OperationalError as exc:
                # A task the worker picked up after the wait (the test's last commits queue
                # them) locks the tables it writes in its own order; PostgreSQL breaks the
                # deadlock by failing one side, and when it is the flush, the flush goes again.
                if not isinstance(exc.__cause__, DeadlockDetected) or attempt + 1 == FLUSH_ATTEMPTS:
                    raise

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "execute_sql_flush", execute_sql_flush)
        yield


@pytest.fixture(autouse=True)
def _own_ledger_anchors(settings: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test gets its own checkpoint folder (created when first written): a test's tenants
    are rolled back or flushed afterwards, and a later verification would rightly report the
    checkpoints of tenants gone from the database as tampering."""
    base = tmp_path_factory.getbasetemp() / "ledger-anchors"
    settings.LEDGER_ANCHOR_DIR = base / uuid.uuid4().hex


@pytest.fixture(autouse=True)
def _fresh_rate_limits() -> None:
    """Every test starts with empty rate-limit windows: counters live in Redis, not in the test
    database, so they would otherwise carry over from earlier tests (and earlier runs)."""
    from config.ratelimit import rate_limits_clear

    rate_limits_clear()


@pytest.fixture(autouse=True)
def _error_codes_are_published(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test during which the API answered an error code that the schema's enum
    (``config.error_codes``) lacks: every error answer is built by ``config.api.error_body``."""
    from config import api
    from config.error_codes import ERROR_CODES

    unpublished: list[str] = []
    build = api.error_body

    def checked(code: str, message: str, details: dict[str, Any] | None = None) -> Any:
        if code not in ERROR_CODES:
            unpublished.append(code)
        return build(code, message, details)

    monkeypatch.setattr(api, "error_body", checked)
    yield
    assert not unpublished, f"error codes missing from config/error_codes.py: {unpublished}"


@pytest.fixture(scope="session")
def celery_worker() -> Iterator[Any]:
    """A real Celery worker (solo pool, in a thread of this process) on the test Redis.

    The ping check sends celery.ping through the broker and waits for "pong" in the result
    backend: a full round trip before any test uses the worker. Tests that need the worker to see
    their rows must use ``transactional_db``: it reads through its own connection.
    """
    import celery.contrib.testing.tasks  # noqa: F401 (registers celery.ping)
    from celery.contrib.testing.worker import start_worker

    from config.celery import app

    # Tasks queued by earlier tests (API calls queue embeddings and retrieval counts) name rows
    # those tests' rollbacks removed; a backlog of them would also hold the ping check up past
    # its timeout on a busy machine.
    app.control.purge()
    with start_worker(app, pool="solo", perform_ping_check=True, loglevel="WARNING") as worker:
        yield worker


@pytest.fixture
def redis_unreachable(tmp_path: Any) -> Iterator[None]:
    """REDIS_URL names a socket nobody listens on, until the test ends (and before the other
    fixtures' teardowns, which may use Redis)."""
    from django.test import override_settings

    with override_settings(REDIS_URL=f"unix://{tmp_path}/no-such.sock"):
        yield


@pytest.fixture
def tenant(db: None) -> Tenant:
    return services.tenant_create(name="Acme Research", slug="acme")


@pytest.fixture
def other_tenant(db: None) -> Tenant:
    return services.tenant_create(name="Globex", slug="globex")


@pytest.fixture
def make_agent(db: None) -> Callable[..., Agent]:
    def make(tenant: Tenant, name: str = "Creator1", **fields: Any) -> Agent:
        return services.agent_create(tenant=tenant, name=name, actor="system", **fields)

    return make


@pytest.fixture
def make_key(db: None) -> Callable[..., tuple[ApiKey, str]]:
    def make(
        tenant: Tenant, role: str = Role.ADMIN, agent: Agent | None = None
    ) -> tuple[ApiKey, str]:
        return services.api_key_create(
            tenant=tenant, name=f"{role} key", role=role, agent=agent, actor="system"
        )

    return make


@pytest.fixture
def api_as(make_key: Callable[..., tuple[ApiKey, str]]) -> Callable[..., APIClient]:
    """An API client authenticated with a fresh key of the given tenant, role and agent scope."""

    def client_for(tenant: Tenant, role: str = Role.ADMIN, agent: Agent | None = None) -> APIClient:
        _, raw_key = make_key(tenant, role=role, agent=agent)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
        return client

    return client_for


@pytest.fixture
def client_as(db: None) -> Callable[..., Client]:
    """A signed-in browser client of a new person with ``role`` in ``tenant`` (None: no seat)."""

    def make(tenant: Tenant | None, role: str = Role.REVIEWER, username: str = "") -> Client:
        name = username or f"{role}-{tenant.slug if tenant else 'nobody'}-{uuid.uuid4().hex[:6]}"
        user = get_user_model().objects.create_user(username=name, password="not-used-1234")
        if tenant is not None:
            services.membership_grant(tenant=tenant, user=user, role=role)
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def reviewer_client(tenant: Tenant, client_as: Callable[..., Client]) -> Client:
    return client_as(tenant, Role.REVIEWER)


@pytest.fixture
def tenant_admin_client(tenant: Tenant, client_as: Callable[..., Client]) -> Client:
    return client_as(tenant, Role.ADMIN)


@pytest.fixture
def dissent_embedder(settings: Any) -> Iterator[StandIn]:
    """The local stand-in embedder at the dimensions DissentEmbedding (and Memory) store: texts
    sharing words are similar, so novelty is predictable."""
    with openai_standin(dimensions=DIMENSIONS) as standin:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_URL = standin.url
        settings.EMBEDDING_MODEL = "standin-embed"
        settings.EMBEDDING_DIMENSIONS = DIMENSIONS
        settings.EMBEDDING_API_KEY = "test-key"
        embedder_reset()
        yield standin
    embedder_reset()
