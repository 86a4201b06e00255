"""503 with ``Retry-After`` while PostgreSQL or Redis is unreachable, instead of a 500.

A dependency outage is not a bug in the request: the client should wait and retry (with the same
``Idempotency-Key`` for POSTs), and the log should say "database unavailable" once per request,
not print a traceback. Recovery needs nothing from here: Django checks a kept connection before
reusing it (``CONN_HEALTH_CHECKS``) and redis-py reconnects its pools on the next call.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import kombu.exceptions
import redis
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework import status

from config.api import error_response

logger = logging.getLogger("agent_memory.outage")

RETRY_AFTER_SECONDS = 5

DATABASE_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
REDIS_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.BusyLoadingError,
    kombu.exceptions.OperationalError,
)


def unavailable_dependency(exc: BaseException | None) -> str | None:
    """``"database"`` or ``"redis"`` when ``exc`` (or what caused it) is an outage, else None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DATABASE_ERRORS):
            return "database"
        if isinstance(exc, REDIS_ERRORS):
            return "redis"
        exc = exc.__cause__ or exc.__context__
    return None


def service_unavailable(
    request: HttpRequest, dependency: str, exc: BaseException | None = None
) -> HttpResponse:
    # The exception's class and first line, never its traceback: an outage is not a bug.
    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}" if exc else ""
    logger.warning(
        "%s unavailable (%s): answered %s %s with 503",
        dependency,
        reason,
        request.method,
        request.path,
    )
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = error_response(
            "service_unavailable",
            f"The {dependency} is unavailable; retry after {RETRY_AFTER_SECONDS} seconds "
            "(POSTs with the same Idempotency-Key are not applied twice).",
            status.HTTP_503_SERVICE_UNAVAILABLE,
            {"dependency": dependency, "retry_after_seconds": RETRY_AFTER_SECONDS},
        )
    else:
        response = render(
            request,
            "503.html",
            {"dependency": dependency, "retry_after_seconds": RETRY_AFTER_SECONDS},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class DependencyOutageMiddleware:
    """Turns database and Redis connection failures raised by views into 503.

    Failures raised by other middleware (sessions, auth) reach Django's 500 handler instead,
    which asks ``outage_response`` first.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        dependency = unavailable_dependency(exception)
        if dependency is None:
            return None
        return service_unavailable(request, dependency, exception)


def outage_response(request: HttpRequest) -> HttpResponse | None:
    """From inside Django's 500 handler: a 503 when the exception being handled is an outage."""
    exception = sys.exc_info()[1]
    dependency = unavailable_dependency(exception)
    return None if dependency is None else service_unavailable(request, dependency, exception)
