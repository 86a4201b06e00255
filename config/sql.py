"""Raw SQL rows read by column name: a query's columns can be reordered or added to without a
reader silently taking one for another, as ``row[3]`` would."""

from __future__ import annotations

from typing import Any


def rows_named(cursor: Any) -> list[dict[str, Any]]:
    """The rest of the cursor's rows, each as {column name: value}."""
    columns = [column[0] for column in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def row_named(cursor: Any) -> dict[str, Any] | None:
    """The cursor's next row as {column name: value}, or None when there is none."""
    row = cursor.fetchone()
    if row is None:
        return None
    return dict(zip([column[0] for column in cursor.description], row, strict=True))
