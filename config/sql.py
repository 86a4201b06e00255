"""Rows of raw SQL read by column name.

A query written as SQL returns tuples; reading them as ``row[5]`` ties the code to the order of
the SELECT list, so a column added or moved there silently shifts values into other fields.
These helpers name each value after its column (``row.cosine``); a column needs a name of its
own (an alias for an expression), or the helper refuses the query.
"""

from __future__ import annotations

from collections import namedtuple
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=512)
def _row_type(columns: tuple[str, ...]) -> Any:
    # No rename=True: "?column?" or a duplicate name is a query to fix, not one to guess at.
    return namedtuple("Row", columns)


def _columns(cursor: Any) -> tuple[str, ...]:
    return tuple(column[0] for column in cursor.description)


def rows_named(cursor: Any) -> list[Any]:
    """The cursor's remaining rows, each a named tuple of its columns."""
    row_type = _row_type(_columns(cursor))
    return [row_type._make(row) for row in cursor.fetchall()]


def row_named(cursor: Any) -> Any | None:
    """The cursor's next row as a named tuple of its columns, or None when there is none."""
    row = cursor.fetchone()
    return None if row is None else _row_type(_columns(cursor))._make(row)
