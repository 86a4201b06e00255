"""Every GIN index is written in place: a search never reads a pending list of entries that
grows with each write until a vacuum merges it (memory.episodic.models.Memory's indexes)."""

from __future__ import annotations

import pytest
from django.db import connection

GIN_INDEXES_SQL = """
SELECT index.relname, coalesce(index.reloptions, '{}')
FROM pg_index
JOIN pg_class AS index ON index.oid = pg_index.indexrelid
JOIN pg_am ON pg_am.oid = index.relam
JOIN pg_namespace ON pg_namespace.oid = index.relnamespace
WHERE pg_am.amname = 'gin' AND pg_namespace.nspname = current_schema()
"""


def gin_indexes() -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        cursor.execute(GIN_INDEXES_SQL)
        return {name: list(options) for name, options in cursor.fetchall()}


@pytest.mark.django_db
def test_every_gin_index_is_written_in_place():
    indexes = gin_indexes()

    assert {"memory_agent_lexemes", "event_search_words", "kbchunk_search_vector"} <= set(indexes)
    assert {
        name: options for name, options in indexes.items() if "fastupdate=off" not in options
    } == {}
