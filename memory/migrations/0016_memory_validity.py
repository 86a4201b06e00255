"""Memories' validity intervals (issue 22): valid_from (occurred_at for every memory stored so
far), valid_until and superseded_by. The covering index of the sketch plan gains the interval,
so a default search (which leaves out memories whose validity ended) stays index-only."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0015_content_savings_days"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="valid_from",
            field=models.DateTimeField(null=True),
        ),
        migrations.RunSQL(
            "UPDATE memory_memory SET valid_from = occurred_at WHERE valid_from IS NULL",
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.AlterField(
            model_name="memory",
            name="valid_from",
            field=models.DateTimeField(
                help_text="From when the fact holds; occurred_at by default."
            ),
        ),
        migrations.AddField(
            model_name="memory",
            name="valid_until",
            field=models.DateTimeField(
                blank=True, help_text="Until when the fact held; null while it holds.", null=True
            ),
        ),
        migrations.AddField(
            model_name="memory",
            name="superseded_by",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.RemoveIndex(
            model_name="memory",
            name="memory_agent_sketch",
        ),
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(
                condition=models.Q(("archived_at__isnull", True)),
                fields=["tenant", "agent"],
                include=("id", "expires_at", "valid_from", "valid_until", "embedding_bits"),
                name="memory_agent_sketch",
            ),
        ),
    ]
