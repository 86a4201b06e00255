"""GIN indexes written in place (fastupdate off): scans no longer read a pending list that
grows with every write until a vacuum merges it (memory.episodic.models.Memory). Altered,
not rebuilt; the entries already pending are merged now."""

import django.contrib.postgres.indexes
from django.db import migrations

INDEXES = ["event_search_words"]


def _in_place(names: list[str]) -> str:
    return "".join(
        f"ALTER INDEX {name} SET (fastupdate = off);"
        f" SELECT gin_clean_pending_list('{name}'::regclass);"
        for name in names
    )


def _queued(names: list[str]) -> str:
    return "".join(f"ALTER INDEX {name} RESET (fastupdate);" for name in names)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0014_event_override_confirmed_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(_in_place(INDEXES), reverse_sql=_queued(INDEXES)),
            ],
            state_operations=[
                migrations.RemoveIndex(
                    model_name="event",
                    name="event_search_words",
                ),
                migrations.AddIndex(
                    model_name="event",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fastupdate=False,
                        fields=["tenant", "search_words"],
                        name="event_search_words",
                    ),
                ),
            ],
        ),
    ]
