"""Optional OpenTelemetry tracing (``OTEL_TRACING=true``, the ``otel`` extra installed).

Spans for every request (Django), every SQL statement (psycopg) and every Celery task, published
and run, joined into one trace across the web and worker processes, exported over OTLP/HTTP to
``OTEL_EXPORTER_OTLP_ENDPOINT`` (the SDK reads the standard ``OTEL_*`` variables itself). The
request's span carries its ``X-Request-ID`` as ``request.id``, so a trace finds its log lines.

Off by default: the packages are an extra, and with tracing on every request and query pays for
its spans. Started by ``config.wsgi``/``config.asgi`` before Django builds its middleware (the
Django instrumentation adds its own), and in each Celery worker process.
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings

from config.env import ConfigError
from config.logs import HEADER

_lock = threading.Lock()
_started = False


def _response_hook(span: Any, request: Any, response: Any) -> None:
    if span is not None and span.is_recording():
        span.set_attribute("request.id", response.get(HEADER, ""))


def tracing_start(*, exporter: Any = None) -> bool:
    """Instrument this process once, when ``OTEL_TRACING`` is on; whether it is traced.

    ``exporter`` replaces OTLP (the tests hand an in-memory one, exported span by span).
    """
    global _started
    if not settings.OTEL_TRACING:
        return False
    with _lock:
        if _started:
            return True
        try:
            from opentelemetry import trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.instrumentation.celery import CeleryInstrumentor
            from opentelemetry.instrumentation.django import DjangoInstrumentor
            from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        except ImportError as exc:
            raise ConfigError(
                "OTEL_TRACING=true needs the tracing packages: pip install -e '.[otel]' "
                f"({exc.name} is missing)"
            ) from exc

        provider = TracerProvider(resource=Resource.create({"service.name": "agent-memory"}))
        if exporter is None:
            # Batched in a background thread: a request never waits for the collector.
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        DjangoInstrumentor().instrument(response_hook=_response_hook)
        PsycopgInstrumentor().instrument(enable_commenter=False)
        CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]
        _started = True
        return True


def tracing_stop() -> None:
    """Undo the instrumentation (tests); the tracer provider stays, as the API allows one."""
    global _started
    with _lock:
        if not _started:
            return
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.instrumentation.django import DjangoInstrumentor
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

        DjangoInstrumentor().uninstrument()
        PsycopgInstrumentor().uninstrument()
        CeleryInstrumentor().uninstrument()  # type: ignore[no-untyped-call]
        _started = False
