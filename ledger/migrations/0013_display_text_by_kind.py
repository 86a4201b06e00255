import django.contrib.postgres.fields
from django.db import migrations, models

# ledger.models.displayable_text now depends on the kind: a completed workflow step shows its
# `output` (design note 001). SET EXPRESSION (PostgreSQL 17+) recomputes the stored search words
# of every event in a table rewrite, which fires no row trigger, so the append-only rule stands;
# the GIN index over them is rebuilt with the table.
FORWARD = """
CREATE OR REPLACE FUNCTION ledger_display_text(kind text, payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce((
        SELECT payload ->> key
        FROM unnest(CASE WHEN kind = 'workflow.step_completed'
                         THEN ARRAY['text', 'summary', 'output', 'goal']
                         ELSE ARRAY['text', 'summary', 'goal'] END)
             WITH ORDINALITY AS keys(key, position)
        WHERE jsonb_typeof(payload -> key) = 'string' AND payload ->> key <> ''
        ORDER BY position LIMIT 1), '')
$$;
ALTER TABLE ledger_event ALTER COLUMN search_words
    SET EXPRESSION AS (ledger_words(ledger_display_text(kind, payload)));
DROP FUNCTION ledger_display_text(jsonb);
"""
BACKWARD = """
CREATE OR REPLACE FUNCTION ledger_display_text(payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_typeof(payload -> 'text') = 'string' AND payload ->> 'text' <> ''
            THEN payload ->> 'text'
        WHEN jsonb_typeof(payload -> 'summary') = 'string' AND payload ->> 'summary' <> ''
            THEN payload ->> 'summary'
        WHEN jsonb_typeof(payload -> 'goal') = 'string' AND payload ->> 'goal' <> ''
            THEN payload ->> 'goal'
        ELSE ''
    END
$$;
ALTER TABLE ledger_event ALTER COLUMN search_words
    SET EXPRESSION AS (ledger_words(ledger_display_text(payload)));
DROP FUNCTION ledger_display_text(text, jsonb);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0012_chain_verification"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(FORWARD, reverse_sql=BACKWARD)],
            state_operations=[
                migrations.AlterField(
                    model_name="event",
                    name="search_words",
                    field=models.GeneratedField(
                        db_persist=True,
                        expression=models.Func(
                            models.Func(
                                models.F("kind"),
                                models.F("payload"),
                                function="ledger_display_text",
                            ),
                            function="ledger_words",
                        ),
                        output_field=django.contrib.postgres.fields.ArrayField(
                            base_field=models.TextField(), size=None
                        ),
                    ),
                )
            ],
        )
    ]
