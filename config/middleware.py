from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from rest_framework import status

from config.api import error_response


class ApiBodyLimitMiddleware:
    """Refuse an API body over the limit from its Content-Length, before anything reads it.

    Bodies without a Content-Length (chunked) are still capped by Django's
    DATA_UPLOAD_MAX_MEMORY_SIZE, which the API's exception handler turns into the same 413.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/"):
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > settings.API_MAX_BODY_BYTES:
                return error_response(
                    "payload_too_large",
                    f"The request body is {length} bytes; the limit is "
                    f"{settings.API_MAX_BODY_BYTES} bytes.",
                    status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
                    {"limit_bytes": settings.API_MAX_BODY_BYTES},
                )
        return self.get_response(request)
