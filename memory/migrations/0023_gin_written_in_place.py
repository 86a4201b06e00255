"""GIN indexes written in place (fastupdate off): scans no longer read a pending list that
grows with every write until a vacuum merges it (memory.episodic.models.Memory). Altered,
not rebuilt; the entries already pending are merged now."""

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
from django.db import migrations, models

from config.migration_sql import gin_written_in_place

INDEXES = [
    "contentitem_tags",
    "kbchunk_search_vector",
    "memory_tags",
    "memory_agent_lexemes",
    "memory_metadata",
]


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0015_event_gin_written_in_place"),
        ("memory", "0022_metadata_terms"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                gin_written_in_place(*INDEXES),
            ],
            state_operations=[
                migrations.RemoveIndex(
                    model_name="contentitem",
                    name="contentitem_tags",
                ),
                migrations.RemoveIndex(
                    model_name="knowledgechunk",
                    name="kbchunk_search_vector",
                ),
                migrations.RemoveIndex(
                    model_name="memory",
                    name="memory_tags",
                ),
                migrations.RemoveIndex(
                    model_name="memory",
                    name="memory_agent_lexemes",
                ),
                migrations.RemoveIndex(
                    model_name="memory",
                    name="memory_metadata",
                ),
                migrations.AddIndex(
                    model_name="contentitem",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fastupdate=False, fields=["tags"], name="contentitem_tags"
                    ),
                ),
                migrations.AddIndex(
                    model_name="knowledgechunk",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fastupdate=False,
                        fields=["tenant", "search_vector"],
                        name="kbchunk_search_vector",
                    ),
                ),
                migrations.AddIndex(
                    model_name="memory",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fastupdate=False,
                        fields=["metadata"],
                        name="memory_metadata",
                        opclasses=["jsonb_path_ops"],
                    ),
                ),
                migrations.AddIndex(
                    model_name="memory",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fastupdate=False, fields=["tags"], name="memory_tags"
                    ),
                ),
                migrations.AddIndex(
                    model_name="memory",
                    index=django.contrib.postgres.indexes.GinIndex(
                        models.Func(
                            models.F("agent"),
                            models.F("search_vector"),
                            function="memory_agent_lexemes",
                            output_field=django.contrib.postgres.fields.ArrayField(
                                base_field=models.TextField(), size=None
                            ),
                        ),
                        fastupdate=False,
                        name="memory_agent_lexemes",
                    ),
                ),
            ],
        ),
    ]
