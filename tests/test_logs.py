"""Request ids (echoed, taken from a trusted proxy, carried into tasks) and JSON log lines."""

from __future__ import annotations

import json
import logging
import re
import sys
import time

import pytest
from celery.signals import task_prerun
from django.test import Client

from config.logs import HEADER, JsonFormatter, RequestIdFilter, request_id_bound
from config.security import SecretRedactingFilter
from ledger.models import Role
from tests.live_server import live_server, log_text

pytestmark = pytest.mark.django_db

GENERATED = re.compile(r"^[0-9a-f]{32}$")


def test_every_response_echoes_a_new_request_id():
    first = Client().get("/healthz")
    second = Client().get("/api/v1/agents/")

    assert GENERATED.match(first[HEADER])
    assert GENERATED.match(second[HEADER])
    assert first[HEADER] != second[HEADER]


def test_a_clients_request_id_is_ignored_unless_the_proxy_is_trusted(settings):
    sent = Client(HTTP_X_REQUEST_ID="from-the-client")

    assert GENERATED.match(sent.get("/healthz")[HEADER])

    settings.TRUST_X_REQUEST_ID = True
    assert sent.get("/healthz")[HEADER] == "from-the-client"


@pytest.mark.parametrize("sent", ["", "has spaces", "line\nbreak", "x" * 129, "ü"])
def test_a_proxys_malformed_request_id_is_replaced(settings, sent):
    settings.TRUST_X_REQUEST_ID = True

    echoed = Client(HTTP_X_REQUEST_ID=sent).get("/healthz")[HEADER]

    assert GENERATED.match(echoed)


def json_line(record: logging.LogRecord) -> dict:
    RequestIdFilter().filter(record)
    SecretRedactingFilter().filter(record)
    return json.loads(JsonFormatter().format(record))


def test_a_json_line_has_the_request_id_the_extras_and_a_redacted_traceback():
    secret = "am_live_" + "k" * 40
    try:
        raise ValueError(f"Authorization: Bearer {secret}")
    except ValueError:
        with request_id_bound("req-7"):
            record = logging.LogRecord(
                "agent_memory.test", logging.ERROR, __file__, 1, "failed %s", ("twice",), None
            )
            record.exc_info = sys.exc_info()
            record.status_code = 500
            line = json_line(record)

    assert line["message"] == "failed twice"
    assert line["level"] == "ERROR"
    assert line["logger"] == "agent_memory.test"
    assert line["request_id"] == "req-7"
    assert line["status_code"] == 500
    assert "ValueError" in line["exception"]
    assert secret not in json.dumps(line)
    assert line["time"].endswith("+00:00")


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_the_server_writes_json_lines_with_the_proxys_request_id():
    env = {"LOG_FORMAT": "json", "TRUST_X_REQUEST_ID": "true"}
    with live_server(env=env) as server:
        status, headers, _ = server.request(
            "GET", "/api/v1/no-such-route/", headers={"X-Request-ID": "proxy-abc-123"}
        )
        time.sleep(0.2)
        lines = [json.loads(line) for line in log_text(server).splitlines() if line.startswith("{")]

    assert status == 404
    assert headers["x-request-id"] == "proxy-abc-123"
    not_found = [line for line in lines if line.get("request_id") == "proxy-abc-123"]
    assert not_found, lines
    assert "Not Found" in not_found[0]["message"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.celery_worker
def test_tasks_queued_by_a_request_run_with_its_request_id(
    celery_worker, tenant, make_agent, api_as, dissent_embedder, settings
):
    from config.logs import request_id_current

    settings.TRUST_X_REQUEST_ID = True
    client = api_as(tenant, role=Role.AGENT, agent=make_agent(tenant, name="Creator1"))
    seen: list[tuple[str, str]] = []

    def note(task=None, **_):
        seen.append((task.name, request_id_current()))

    task_prerun.connect(note, weak=False)
    try:
        stored = client.post(
            "/api/v1/memories/",
            {"content": "the budget was approved"},
            format="json",
            HTTP_X_REQUEST_ID="store-1",
        )
        found = client.post(
            "/api/v1/memories/search/",
            {"query": "budget approved"},
            format="json",
            HTTP_X_REQUEST_ID="search-1",
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(rid == "search-1" for _, rid in seen):
            time.sleep(0.1)
    finally:
        task_prerun.disconnect(note)

    assert stored.status_code == 201
    assert found.status_code == 200
    assert found[HEADER] == "search-1"
    ids_by_task = dict(seen)
    # Queued on commit by the store, and by the search's retrieval recorder thread.
    assert "store-1" in {
        rid for name, rid in seen if name != "memory.tasks.memories_mark_retrieved_batch"
    }
    assert ids_by_task.get("memory.tasks.memories_mark_retrieved_batch") == "search-1", seen
