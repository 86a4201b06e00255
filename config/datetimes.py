"""Date-times given by clients: one parser for API query parameters, page filters and imports.

``django.utils.dateparse.parse_datetime`` raises ``ValueError`` for a well-formed string that is
no instant (an offset of 24 hours or more such as ``+24:00``, the 30th of February), and
PostgreSQL refuses offsets past ±15:59 that Python takes (``+22:36``): both were 500s wherever a
client's string went straight to a filter. Every instant is returned in UTC, so no client's
offset ever reaches the database. DRF's ``DateTimeField`` (request bodies) already does the same.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils.dateparse import parse_datetime


def client_datetime_parse(raw: str, *, assume_utc: bool = True) -> datetime | None:
    """The ISO 8601 date-time in ``raw`` as an aware UTC datetime, or None when it is not one.

    A value without an offset is read as UTC, or refused when ``assume_utc`` is False.
    """
    try:
        parsed = parse_datetime(raw.strip())
    except ValueError:
        return None
    if parsed is None:
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC) if assume_utc else None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # year 1 east of Greenwich, year 9999 west of it
        return None
