"""Forget stored vectors that have no direction, so the backfill embeds their rows again.

Before issue 18 a client could store an all-zero embedding, and pgvector's cosine distance to a
zero vector (or to one whose float32 squares underflow or overflow) is NaN: every search of that
agent answered 500 from then on. Such a vector is exactly one whose distance to itself is NaN
(PostgreSQL's NaN equals NaN). Memories and knowledge chunks keep their rows without a vector
(the backfill jobs fill them); an event's index row is derived data and is dropped (the event
backfill adds it again).
"""

from django.db import migrations

WITHOUT_DIRECTION = "(embedding <=> embedding) = 'NaN'::float8"


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0013_shred_keys_of_deleted_agents"),
    ]

    operations = [
        migrations.RunSQL(
            [
                "UPDATE memory_memory SET embedding = NULL, embedding_model = '' "
                f"WHERE embedding IS NOT NULL AND {WITHOUT_DIRECTION}",
                "UPDATE memory_knowledgechunk SET embedding = NULL, embedding_model = '' "
                f"WHERE embedding IS NOT NULL AND {WITHOUT_DIRECTION}",
                f"DELETE FROM memory_eventembedding WHERE {WITHOUT_DIRECTION}",
            ],
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
