"""The input rules every write of rounds, dissents and overrides applies (and the import too), so
a refused text or time gets the same code from the API, the import and the pages."""

from __future__ import annotations

from datetime import datetime

from config.api import ApiError

TEXT_MAX_CHARS = 20_000
NOTE_MAX_CHARS = 2_000


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def text_problem(text: str, *, field: str) -> ApiError | None:
    if not text.strip():
        return ApiError(
            code="empty_text",
            message=f"{field} is empty or only whitespace.",
            details={"field": field},
        )
    if len(text) > TEXT_MAX_CHARS:
        return ApiError(
            code="text_too_long",
            message=f"{field} has {len(text)} characters; the limit is {TEXT_MAX_CHARS}.",
            details={"field": field, "limit": TEXT_MAX_CHARS},
        )
    return None


def texts_check(**texts: str) -> None:
    for field, text in texts.items():
        problem = text_problem(text, field=field)
        if problem is not None:
            raise problem


def occurred_at_check(occurred_at: datetime | None, now: datetime) -> datetime:
    if occurred_at is None:
        return now
    if occurred_at > now:
        raise ApiError(
            code="occurred_in_future",
            message="occurred_at lies in the future.",
            details={"occurred_at": occurred_at.isoformat()},
        )
    return occurred_at


def note_check(note: str) -> str:
    """A reviewer's note on a revert or its withdrawal: optional, trimmed, at most
    NOTE_MAX_CHARS (400 ``note_too_long``)."""
    note = note.strip()
    if len(note) > NOTE_MAX_CHARS:
        raise ApiError(
            code="note_too_long",
            message=f"The note has {len(note)} characters; the limit is {NOTE_MAX_CHARS}.",
            details={"field": "note", "limit": NOTE_MAX_CHARS},
        )
    return note
