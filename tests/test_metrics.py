"""/metrics: who may scrape it, and that its series move with what the service does."""

from __future__ import annotations

import time

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from config.celery import app
from ledger.models import Role

SEARCH_ROUTE = "api/v1/memories/search/"


def scrape(client: Client | None = None, **headers) -> dict[tuple[str, frozenset], float]:
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def agent_client(tenant, make_agent, api_as, dissent_embedder):
    agent = make_agent(tenant, name="Creator1")
    return api_as(tenant, role=Role.AGENT, agent=agent)


@pytest.mark.django_db
def test_it_answers_loopback_and_refuses_other_addresses():
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="::1").get("/metrics").status_code == 200

    refused = Client(REMOTE_ADDR="203.0.113.9").get("/metrics")

    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "metrics_forbidden"


@pytest.mark.django_db
def test_a_request_through_an_untrusted_proxy_needs_the_token(settings):
    proxied = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")

    assert proxied.get("/metrics").status_code == 403

    settings.TRUSTED_PROXY_COUNT = 1
    assert proxied.get("/metrics").status_code == 403  # the client behind the proxy is outside
    assert Client(HTTP_X_FORWARDED_FOR="127.0.0.1").get("/metrics").status_code == 200


@pytest.mark.django_db
def test_the_token_opens_it_from_anywhere(settings):
    settings.METRICS_TOKEN = "scrape-secret"
    outside = Client(REMOTE_ADDR="203.0.113.9")

    assert outside.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert outside.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret").status_code == 200


@pytest.mark.django_db
def test_addresses_can_be_narrowed_to_none(settings):
    settings.METRICS_ALLOWED_NETWORKS = ()

    assert Client().get("/metrics").status_code == 403


@pytest.mark.django_db(transaction=True)
def test_requests_searches_embeddings_and_appends_move_their_series(agent_client):
    before = scrape()

    stored = agent_client.post(
        "/api/v1/memories/", {"content": "the budget was approved"}, format="json"
    )
    found = agent_client.post(
        "/api/v1/memories/search/", {"query": "budget approved", "top_k": 3}, format="json"
    )
    missing = agent_client.get("/api/v1/no-such-route/")
    after = scrape()

    assert stored.status_code == 201
    assert found.status_code == 200
    assert missing.status_code == 404
    requests = "agent_memory_http_requests_total"
    assert value(after, requests, route=SEARCH_ROUTE, method="POST", status="200") == (
        value(before, requests, route=SEARCH_ROUTE, method="POST", status="200") + 1
    )
    assert value(after, requests, route="<unmatched>", method="GET", status="404") == (
        value(before, requests, route="<unmatched>", method="GET", status="404") + 1
    )
    latency = "agent_memory_http_request_duration_seconds_count"
    assert value(after, latency, route=SEARCH_ROUTE, method="POST") == (
        value(before, latency, route=SEARCH_ROUTE, method="POST") + 1
    )
    # An agent of one memory is searched by its sign-bit sketches.
    searches = "agent_memory_search_duration_seconds_count"
    assert value(after, searches, plan="sketch") == value(before, searches, plan="sketch") + 1
    embeddings = "agent_memory_embedder_duration_seconds_count"
    assert value(after, embeddings, backend="openai", outcome="ok") >= (
        value(before, embeddings, backend="openai", outcome="ok") + 2  # the memory, the query
    )
    assert value(after, "agent_memory_embedder_in_flight") == 0
    assert value(after, "agent_memory_ledger_events_appended_total") > value(
        before, "agent_memory_ledger_events_appended_total"
    )
    assert ("agent_memory_celery_queue_length", frozenset({("queue", "celery")})) in after


@pytest.mark.django_db(transaction=True)
def test_a_logged_dissent_counts_a_trust_recompute(agent_client):
    before = scrape()

    logged = agent_client.post(
        "/api/v1/dissents/", {"text": "The estimate ignores the migration."}, format="json"
    )
    after = scrape()

    assert logged.status_code == 201, logged.content
    name = "agent_memory_trust_recomputes_total"
    assert value(after, name, reason="dissent_logged") == (
        value(before, name, reason="dissent_logged") + 1
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.celery_worker
def test_celery_task_runs_and_failures_are_counted_by_task(celery_worker):
    task = "config.tasks.worker_heartbeat"
    before = scrape()

    app.send_task(task)
    app.send_task(task, args=["an argument it does not take"])  # fails with TypeError
    name = "agent_memory_celery_tasks_total"
    durations = "agent_memory_celery_task_duration_seconds_count"

    def moved(after: dict) -> tuple[float, float, float]:
        return (
            value(after, name, task=task, state="SUCCESS")
            - value(before, name, task=task, state="SUCCESS"),
            value(after, name, task=task, state="FAILURE")
            - value(before, name, task=task, state="FAILURE"),
            value(after, durations, task=task) - value(before, durations, task=task),
        )

    deadline = time.monotonic() + 20
    succeeded, failed, timed = moved(scrape())
    while not (succeeded >= 1 and failed >= 1 and timed >= 2) and time.monotonic() < deadline:
        time.sleep(0.1)
        succeeded, failed, timed = moved(scrape())

    assert succeeded >= 1  # a heartbeat queued by an earlier test may run here too
    assert failed == 1
    assert timed >= 2
