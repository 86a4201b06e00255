"""No API request that answers 5xx leaves a write behind (issue 18).

Every API request runs in one transaction (``ledger.scoping.TenantScopedViewSet.dispatch``): a
request that raises, answers 5xx, or fails to render rolls back everything it wrote, and one the
database refused (400 ``invalid_value``) keeps nothing either. The view in
``tests/ledger/failing_views.py`` writes through a real service before it fails.
"""

from __future__ import annotations

import pytest

from ledger.models import Agent, Event, IdempotencyRecord, Role

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.ledger.failing_views")]

URL = "/api/v1/test-writes/"


@pytest.fixture
def admin(tenant, api_as):
    client = api_as(tenant, role=Role.ADMIN)
    client.raise_request_exception = False  # answer as the server would: 500
    return client


def written(tenant) -> tuple[bool, int]:
    return (
        Agent.objects.filter(tenant=tenant, name="Written").exists(),
        Event.objects.filter(tenant=tenant, kind="agent.registered").count(),
    )


def test_a_request_that_succeeds_keeps_its_write(tenant, admin):
    response = admin.post(URL, {}, format="json")

    assert response.status_code == 201
    assert written(tenant) == (True, 1)


@pytest.mark.parametrize(
    ("failure", "status"),
    [("exception", 500), ("unrenderable", 500), ("server_error", 503), ("database", 400)],
)
def test_a_write_followed_by_a_failure_leaves_nothing(tenant, admin, failure, status):
    response = admin.post(URL, {"failure": failure}, format="json")

    assert response.status_code == status
    assert written(tenant) == (False, 0)


def test_a_failed_idempotent_request_keeps_no_key_and_its_retry_runs(tenant, admin):
    failed = admin.post(URL, {"failure": "exception"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert failed.status_code == 500
    assert not IdempotencyRecord.objects.exists()

    # The same key again, with a request that now succeeds: it runs, once.
    retried = admin.post(URL, {}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert retried.status_code == 201
    assert written(tenant) == (True, 1)
