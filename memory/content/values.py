"""Content as stored: a value kept as text (or compact JSON), read back, and the store's errors."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from rest_framework import status

from config.api import ApiError
from memory.content.compaction import (
    Content,
)
from memory.models import (
    ContentFormat,
    ContentItem,
)


def not_found(message: str = "No such object.") -> ApiError:
    return ApiError(code="not_found", message=message, status_code=status.HTTP_404_NOT_FOUND)


def bad_request(code: str, message: str, **details: Any) -> ApiError:
    return ApiError(code=code, message=message, details=details)


@dataclass(frozen=True)
class ParsedContent:
    format: str
    body: str
    size: int
    content_hash: str


def content_parse(content: Any) -> ParsedContent:
    """Text is kept as sent; any other JSON value as its compact serialisation. Refuses content
    over ``CONTENT_MAX_BYTES`` (413) and NUL characters, which PostgreSQL text cannot hold."""
    if isinstance(content, str):
        fmt, body = ContentFormat.TEXT, content
    else:
        try:
            body = json.dumps(content, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise bad_request(
                "invalid_content", f"The content is not storable JSON: {exc}"
            ) from exc
        fmt = ContentFormat.JSON
    if "\x00" in body:
        raise bad_request("invalid_content", "The content contains a NUL character (\\u0000).")
    encoded = body.encode("utf-8")
    if len(encoded) > settings.CONTENT_MAX_BYTES:
        raise ApiError(
            code="content_too_large",
            message=f"The content is {len(encoded)} bytes; the limit is "
            f"{settings.CONTENT_MAX_BYTES} bytes.",
            status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            details={"size": len(encoded), "limit_bytes": settings.CONTENT_MAX_BYTES},
        )
    return ParsedContent(
        format=fmt, body=body, size=len(encoded), content_hash=hashlib.sha256(encoded).hexdigest()
    )


def item_value(item: ContentItem) -> Any:
    return json.loads(item.body) if item.format == ContentFormat.JSON else item.body


def item_content(item: ContentItem) -> Content:
    return Content(
        item_type=item.item_type,
        format=item.format,
        text=item.body,
        value=item_value(item),
        source=item.source,
    )
