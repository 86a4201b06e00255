"""OTEL_TRACING: a request, its SQL and the Celery task it queues share one trace."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.test import Client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from config.logs import HEADER
from config.tracing import tracing_start, tracing_stop
from ledger.models import Role


@pytest.fixture
def spans(settings) -> Iterator[InMemorySpanExporter]:
    settings.OTEL_TRACING = True
    exporter = InMemorySpanExporter()
    assert tracing_start(exporter=exporter)
    try:
        yield exporter
    finally:
        tracing_stop()


def test_it_is_off_unless_the_setting_is_on(settings):
    settings.OTEL_TRACING = False

    assert tracing_start() is False


def in_trace(exporter: InMemorySpanExporter, trace_id: int, kind: SpanKind) -> list:
    return [
        span
        for span in exporter.get_finished_spans()
        if span.context.trace_id == trace_id and span.kind is kind
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.celery_worker
def test_a_request_its_sql_and_its_task_share_one_trace(
    celery_worker, spans, tenant, make_agent, api_as, dissent_embedder
):
    key_client = api_as(tenant, role=Role.AGENT, agent=make_agent(tenant, name="Creator1"))
    client = Client(HTTP_AUTHORIZATION=key_client._credentials["HTTP_AUTHORIZATION"])

    stored = client.post(
        "/api/v1/memories/", {"content": "the budget"}, content_type="application/json"
    )

    assert stored.status_code == 201
    server = next(
        span
        for span in spans.get_finished_spans()
        if span.kind is SpanKind.SERVER and span.attributes.get("http.route") == "api/v1/memories/$"
    )
    assert server.attributes["request.id"] == stored[HEADER]
    trace_id = server.context.trace_id
    sql = in_trace(spans, trace_id, SpanKind.CLIENT)
    assert any(span.attributes.get("db.system") == "postgresql" for span in sql)
    assert in_trace(spans, trace_id, SpanKind.PRODUCER), "the task it queued"
    deadline = time.monotonic() + 20
    while not in_trace(spans, trace_id, SpanKind.CONSUMER) and time.monotonic() < deadline:
        time.sleep(0.1)
    ran = in_trace(spans, trace_id, SpanKind.CONSUMER)
    assert ran, "the worker's run of the task joins the request's trace"
    assert ran[0].name.startswith("run/memory.tasks.")
