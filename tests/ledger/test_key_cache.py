"""The per-process cache of verified API keys (ledger.key_cache): it spares authentication its
query, and no change to a key, its agent or its tenant outlives it in any process."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from ledger import key_cache, services
from ledger.models import ApiKey, Role

pytestmark = pytest.mark.django_db


def bearer(raw_key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client


def key_reads(client: APIClient, path: str = "/api/v1/agents/") -> tuple[int, int]:
    """(status, SELECTs from ledger_apikey) of one GET (recording its use is an UPDATE)."""
    with CaptureQueriesContext(connection) as queries:
        status = client.get(path).status_code
    reads = [
        q for q in queries.captured_queries
        if q["sql"].startswith("SELECT") and 'FROM "ledger_apikey"' in q["sql"]
    ]  # fmt: skip
    return status, len(reads)


def as_another_process(entries: dict[str, key_cache._Entry]) -> None:
    """What a web process that verified the keys before the change still holds."""
    key_cache._entries.clear()
    key_cache._entries.update(entries)


def test_a_verified_key_is_not_read_again(tenant, make_key):
    _, raw_key = make_key(tenant, role=Role.ADMIN)
    client = bearer(raw_key)

    assert key_reads(client) == (200, 1)
    assert key_reads(client) == (200, 0)


def test_a_revocation_reaches_a_process_that_kept_the_key(tenant, make_key, api_as):
    key, raw_key = make_key(tenant, role=Role.AGENT)
    client = bearer(raw_key)
    assert client.get("/api/v1/agents/").status_code == 200
    kept = dict(key_cache._entries)

    revoked = api_as(tenant, role=Role.ADMIN).post(f"/api/v1/api-keys/{key.pk}/revoke/")
    as_another_process(kept)

    assert revoked.status_code == 200
    assert key_reads(client) == (401, 1)


def test_a_change_in_the_django_admin_reaches_every_process(tenant, make_key, admin_client):
    key, raw_key = make_key(tenant, role=Role.REVIEWER)
    client = bearer(raw_key)
    assert client.post("/api/v1/agents/", {"name": "x"}, format="json").status_code == 403
    kept = dict(key_cache._entries)

    admin_client.post(
        f"/admin/ledger/apikey/{key.pk}/change/",
        {"name": key.name, "role": Role.ADMIN, "revoked_at_0": "", "revoked_at_1": ""},
    )
    as_another_process(kept)

    assert ApiKey.objects.get(pk=key.pk).role == Role.ADMIN
    assert client.post("/api/v1/agents/", {"name": "x"}, format="json").status_code == 201


def test_deleting_the_agent_ends_its_keys_in_every_process(tenant, make_agent, make_key):
    agent = make_agent(tenant, name="alpha")
    _, raw_key = make_key(tenant, role=Role.AGENT, agent=agent)
    client = bearer(raw_key)
    assert client.get("/api/v1/agents/").status_code == 200
    kept = dict(key_cache._entries)

    services.agent_delete(agent=agent, actor="system")
    as_another_process(kept)

    assert client.get("/api/v1/agents/").status_code == 401


def test_an_agent_scoped_key_reads_its_agent_afresh(tenant, make_agent, make_key):
    agent = make_agent(tenant, name="alpha")
    _, raw_key = make_key(tenant, role=Role.AGENT, agent=agent)
    client = bearer(raw_key)
    client.get("/api/v1/agents/")

    with CaptureQueriesContext(connection) as queries:
        listed = client.get("/api/v1/agents/")

    assert listed.status_code == 200
    assert [row["name"] for row in listed.json()["results"]] == ["alpha"]
    assert any('FROM "ledger_agent"' in q["sql"] for q in queries.captured_queries)
    assert not any('FROM "ledger_apikey"' in q["sql"] for q in queries.captured_queries)


def test_a_redis_that_lost_the_version_never_matches_an_entry(tenant, make_key):
    from config.ratelimit import redis_client

    _, raw_key = make_key(tenant, role=Role.ADMIN)
    client = bearer(raw_key)
    client.get("/api/v1/agents/")

    redis_client().delete(key_cache.VERSION_KEY)  # a restart without persistence, a flush

    assert key_reads(client) == (200, 1)


def test_entries_expire(tenant, make_key, monkeypatch, settings):
    _, raw_key = make_key(tenant, role=Role.ADMIN)
    client = bearer(raw_key)
    client.get("/api/v1/agents/")
    later = time.monotonic() + settings.API_KEY_CACHE_SECONDS + 1

    monkeypatch.setattr(key_cache, "monotonic", lambda: later)

    assert key_reads(client) == (200, 1)


def test_zero_switches_the_cache_off(tenant, make_key, settings):
    settings.API_KEY_CACHE_SECONDS = 0
    _, raw_key = make_key(tenant, role=Role.ADMIN)
    client = bearer(raw_key)
    client.get("/api/v1/agents/")

    assert key_reads(client) == (200, 1)


def test_a_key_that_was_not_found_is_found_once_created(tenant):
    client = bearer("amk_not-yet")
    assert client.get("/api/v1/agents/").status_code == 401

    ApiKey.objects.create(
        tenant=tenant, name="late", prefix="amk_not", key_hash=services.api_key_hash("amk_not-yet")
    )

    assert client.get("/api/v1/agents/").status_code == 200
