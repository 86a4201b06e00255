"""The real service for client and MCP tests: gunicorn (tests/live_server.py) on a loopback port,
on this run's test database and Redis, started once per run. Each test gets a tenant of its own
with committed rows (``transactional_db``), so the server's own connections see them; they are
flushed after the test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from ledgered_memory import Client, RetryPolicy

from ledger import services
from ledger.models import Role
from tests.live_server import live_server


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


@pytest.fixture(scope="session")
def service(django_db_setup: None) -> Iterator[Service]:
    # Session-wide: one gunicorn for every client test; stopped (by live_server) before the
    # test database is dropped, since this fixture depends on its creation.
    with live_server() as server:
        yield Service(base_url=f"http://127.0.0.1:{server.port}", port=server.port)


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


@pytest.fixture
def agent_key(admin: Client) -> str:
    """The raw secret of a key scoped to agent "Planner" (agent "Other" exists beside it)."""
    admin.agents_create(name="Planner")
    admin.agents_create(name="Other")
    return admin.api_keys_create(name="planner", role="agent", agent="Planner")["key"]
