"""Security headers Django does not set itself, and the log filter that keeps secrets out."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

# The pages are built to need nothing else: our own scripts and styles as files, no inline code.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'self'; frame-ancestors 'none'; form-action 'self'"
)
# Swagger UI's page (drf-spectacular's template) carries one inline <style> block; its script is
# served as a file (the split view), so only styles are relaxed, and only on that page.
DOCS_CONTENT_SECURITY_POLICY = CONTENT_SECURITY_POLICY.replace(
    "style-src 'self'", "style-src 'self' 'unsafe-inline'"
)


class ContentSecurityPolicyMiddleware:
    """Adds Content-Security-Policy to every response that has not set its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            docs = request.path.startswith(settings.API_DOCS_PATH)
            response["Content-Security-Policy"] = (
                DOCS_CONTENT_SECURITY_POLICY if docs else CONTENT_SECURITY_POLICY
            )
        return response


REDACTED = "[redacted]"
# What a secret looks like wherever it might end up in a log line: our API keys (amk_...), the
# value of an Authorization header or a bearer token, and password-like fields in forms, JSON,
# query strings and reprs.
_SECRET_PATTERNS = [
    (re.compile(r"amk_[A-Za-z0-9_\-]+"), REDACTED),
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=\-]{8,}"), rf"\1 {REDACTED}"),
    (
        re.compile(
            r"(?i)((?:http_)?authorization['\"]?\s*[:=]\s*['\"]?)[^'\"\s,}]+(?:\s[^'\"\s,}]+)?"
        ),
        rf"\1{REDACTED}",
    ),
    (
        re.compile(
            r"(?i)((?:password|passwd|secret|api_key|apikey|secret_key|access_token)"
            r"[0-9]*['\"]?\s*[:=]\s*['\"]?)[^'\"\s&,}]+"
        ),
        rf"\1{REDACTED}",
    ),
]


def redact(text: str) -> str:
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class SecretRedactingFilter(logging.Filter):
    """Rewrites each record's message and traceback with secrets replaced by ``[redacted]``.

    Installed on the handlers, so it sees records of every logger (Django's request errors,
    Celery, gunicorn's through the root logger, our own) after they are formatted into text.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        record.msg = redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
            # The formatter would format exc_info again and print the secret; exc_text is enough.
            record.exc_info = None
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
