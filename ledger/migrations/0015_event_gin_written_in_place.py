"""GIN indexes written in place (fastupdate off): scans no longer read a pending list that
grows with every write until a vacuum merges it (memory.episodic.models.Memory). Altered,
not rebuilt; the entries already pending are merged now."""

import django.contrib.postgres.indexes
from django.db import migrations

from config.migration_sql import gin_written_in_place

INDEXES = ["event_search_words"]


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0014_event_override_confirmed_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                gin_written_in_place(*INDEXES),
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
