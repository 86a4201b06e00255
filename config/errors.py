"""Django-level error pages: JSON in the API's error format under /api/, HTML elsewhere."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views import defaults

from config.api import api_not_found, api_server_error
from config.outage import outage_response


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    # A database or Redis failure raised outside a view (sessions, auth middleware) lands here.
    unavailable = outage_response(request)
    if unavailable is not None:
        return unavailable
    if request.path.startswith("/api/"):
        return api_server_error(request)
    return defaults.server_error(request)
