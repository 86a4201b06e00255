"""Operations that more than one app's migrations run. Migrations import them, so what a
function here emits must never change; a new need gets a new function."""

from __future__ import annotations

from django.db import migrations


def gin_written_in_place(*names: str) -> migrations.RunSQL:
    """GIN indexes written in place (fastupdate off), the entries already pending merged now;
    altered, not rebuilt. Reversed: back to PostgreSQL's default pending list."""
    return migrations.RunSQL(
        "".join(
            f"ALTER INDEX {name} SET (fastupdate = off);"
            f" SELECT gin_clean_pending_list('{name}'::regclass);"
            for name in names
        ),
        reverse_sql="".join(f"ALTER INDEX {name} RESET (fastupdate);" for name in names),
    )
