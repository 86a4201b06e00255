from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from ledger import key_cache
from ledger.models import ApiKey, Event, Role

pytestmark = pytest.mark.django_db


def bearer(raw_key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client


def test_it_stores_only_a_hash_and_shows_the_key_once(tenant, api_as):
    admin = api_as(tenant, role=Role.ADMIN)

    created = admin.post(
        "/api/v1/api-keys/", {"name": "orchestrator", "role": "agent"}, format="json"
    )
    fetched = admin.get(f"/api/v1/api-keys/{created.json()['id']}/")

    raw_key = created.json()["key"]
    stored = ApiKey.objects.get(pk=created.json()["id"])
    assert created.status_code == 201
    assert raw_key.startswith(stored.prefix)
    assert raw_key not in stored.key_hash
    assert "key" not in fetched.json()
    assert raw_key not in str(list(Event.objects.values_list("payload", flat=True)))
    assert bearer(raw_key).get("/api/v1/agents/").status_code == 200


def test_a_key_can_be_scoped_to_an_agent_of_the_same_tenant_only(
    tenant, other_tenant, make_agent, api_as
):
    make_agent(tenant, name="Creator1")
    make_agent(other_tenant, name="Stranger")
    admin = api_as(tenant, role=Role.ADMIN)

    scoped = admin.post("/api/v1/api-keys/", {"name": "c1", "agent": "Creator1"}, format="json")
    foreign = admin.post("/api/v1/api-keys/", {"name": "x", "agent": "Stranger"}, format="json")

    assert scoped.status_code == 201
    assert scoped.json()["agent"] == "Creator1"
    assert foreign.status_code == 400
    assert foreign.json()["error"]["details"]["agent"]


def test_revocation_takes_effect_on_the_next_request(tenant, api_as):
    admin = api_as(tenant, role=Role.ADMIN)
    created = admin.post("/api/v1/api-keys/", {"name": "temp"}, format="json").json()
    client = bearer(created["key"])
    assert client.get("/api/v1/agents/").status_code == 200

    revoked = admin.post(f"/api/v1/api-keys/{created['id']}/revoke/")
    after = client.get("/api/v1/agents/")

    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    assert after.status_code == 401
    assert after.json()["error"]["code"] == "invalid_api_key"


def test_revoking_twice_logs_one_event(tenant, make_key, api_as):
    key, _ = make_key(tenant, role=Role.AGENT)
    admin = api_as(tenant, role=Role.ADMIN)

    admin.post(f"/api/v1/api-keys/{key.pk}/revoke/")
    admin.post(f"/api/v1/api-keys/{key.pk}/revoke/")

    assert Event.objects.filter(tenant=tenant, kind="api_key.revoked").count() == 1


def test_it_records_when_a_key_was_last_used(tenant, make_key):
    key, raw_key = make_key(tenant, role=Role.AGENT)
    assert key.last_used_at is None

    bearer(raw_key).get("/api/v1/agents/")

    key.refresh_from_db()
    assert key.last_used_at is not None


def test_a_key_used_within_the_minute_is_not_written_again(tenant, make_key):
    key, raw_key = make_key(tenant, role=Role.AGENT)
    client = bearer(raw_key)
    client.get("/api/v1/agents/")
    key.refresh_from_db()
    first_use = key.last_used_at

    with CaptureQueriesContext(connection) as queries:
        client.get("/api/v1/agents/")

    assert not [q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=first_use - timedelta(minutes=5))
    key_cache.cache_clear()  # as if this process had kept the key past its cache time too
    client.get("/api/v1/agents/")
    key.refresh_from_db()
    assert key.last_used_at > first_use  # a minute later it is recorded again


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "not_authenticated"),
        ("Bearer amk_not-a-real-key", "invalid_api_key"),
        ("Bearer", "invalid_api_key"),
        ("Token something", "not_authenticated"),
    ],
)
def test_missing_or_wrong_keys_get_401(tenant, header, code):
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)

    response = client.get("/api/v1/agents/")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == code
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
