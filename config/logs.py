"""Logs an operator can follow across processes: JSON lines (``LOG_FORMAT=json``) and a request id.

Every request gets an id: the one a trusted proxy sent in ``X-Request-ID``
(``TRUST_X_REQUEST_ID``), else a new one. The response echoes it, every log record written while
the request is served carries it, and so does every Celery task the request queues (a message
header, restored in the worker while the task runs; tasks that task queues carry it on). Text
stays the default, for people reading ``make up``'s terminal.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.signals import request_finished
from django.http import HttpRequest, HttpResponse

from config.security import redact

HEADER = "X-Request-ID"
_HEADER_META = "HTTP_X_REQUEST_ID"
# The Celery message header that carries it to the worker.
TASK_HEADER = "request_id"
# What a proxy's id may look like: UUIDs, hex, the usual trace-id shapes; nothing that could
# break a log line or a header.
_ACCEPTED = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

_request_id: ContextVar[str] = ContextVar("request_id", default="")


def request_id_current() -> str:
    return _request_id.get()


def request_id_set(value: str) -> None:
    """For a task's run, between Celery's prerun and postrun signals (no ``with`` spans them)."""
    _request_id.set(value)


@contextmanager
def request_id_bound(value: str) -> Iterator[None]:
    token = _request_id.set(value)
    try:
        yield
    finally:
        _request_id.reset(token)


def request_id_for(request: HttpRequest) -> str:
    """The proxy's id when the proxy is trusted and the id looks like one, else a new one."""
    if settings.TRUST_X_REQUEST_ID:
        sent = request.META.get(_HEADER_META)
        if isinstance(sent, str) and _ACCEPTED.match(sent):
            return sent
    return uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        value = request_id_for(request)
        # Not reset on the way out: Django logs a 4xx/5xx after the last middleware returned,
        # and that line needs the id too. ``request_finished`` clears it (request_id_clear).
        _request_id.set(value)
        response = self.get_response(request)
        response[HEADER] = value
        return response


def request_id_clear(**_: Any) -> None:
    _request_id.set("")


request_finished.connect(request_id_clear, dispatch_uid="config.logs.request_id_clear")


# --- Celery --------------------------------------------------------------------------------------


def task_headers_add(headers: dict[str, Any]) -> None:
    """``before_task_publish``: a task queued while serving a request (or running a task) carries
    that request's id."""
    current = _request_id.get()
    if current and TASK_HEADER not in headers:
        headers[TASK_HEADER] = current


def task_request_id(task: Any) -> str:
    """The id a running task's message carried (custom headers become attributes of
    ``task.request``), or empty."""
    value = getattr(getattr(task, "request", None), TASK_HEADER, None)
    return value if isinstance(value, str) and _ACCEPTED.match(value) else ""


# --- Records -------------------------------------------------------------------------------------


class RequestIdFilter(logging.Filter):
    """Puts the current request id on every record (empty outside a request or task)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _request_id.get()
        return True


# LogRecord's own attributes; anything else on a record came from ``extra=`` and is kept.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "request_id",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, logger, message, request id, the
    exception's traceback when there is one, and whatever the call passed as ``extra``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", "")
        if request_id:
            line["request_id"] = request_id
        # SecretRedactingFilter has put the traceback, redacted, in exc_text.
        if record.exc_info:
            line["exception"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            line["exception"] = record.exc_text
        for key, value in vars(record).items():
            if key in _RECORD_FIELDS or key.startswith("_") or isinstance(value, HttpRequest):
                continue  # Django's request logs pass the request: its id already names it
            plain = isinstance(value, bool | int | float) or value is None
            line[key] = value if plain else redact(str(value))
        return json.dumps(line, ensure_ascii=False)


def logging_config(*, log_format: str, level: str) -> dict[str, Any]:
    """Django's LOGGING for ``LOG_FORMAT`` (``text`` or ``json``)."""
    formatter = "json" if log_format == "json" else "plain"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
            "json": {"()": "config.logs.JsonFormatter"},
        },
        # API keys, passwords and Authorization headers are redacted from every record.
        "filters": {
            "secrets": {"()": "config.security.SecretRedactingFilter"},
            "request_id": {"()": "config.logs.RequestIdFilter"},
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": formatter,
                "filters": ["secrets", "request_id"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {"django.db.backends": {"level": "WARNING"}},
    }
