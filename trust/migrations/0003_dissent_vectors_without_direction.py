"""Drop dissent vectors without a direction (all zeros, or float32 squares that underflow):
their cosine distance is NaN, which broke novelty. The backfill embeds those dissents again.
See memory/migrations/0014_vectors_without_direction.py."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0014_vectors_without_direction"),
        ("trust", "0002_evidence_from_the_index"),
    ]

    operations = [
        migrations.RunSQL(
            "DELETE FROM trust_dissentembedding WHERE (embedding <=> embedding) = 'NaN'::float8",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
