"""pgvector, and the database-level guarantee that ledger events are never rewritten.

The trigger refuses UPDATE, DELETE and TRUNCATE on ledger_event for every client (ORM, admin,
psql), so history can only grow; corrections are new events.
"""

from django.db import migrations
from pgvector.django import VectorExtension

REFUSE_FUNCTION = """
CREATE OR REPLACE FUNCTION ledger_event_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger events are append-only: % on ledger_event refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'Append a correcting event instead.';
END;
$$;
"""

INSTALL_TRIGGERS = """
CREATE TRIGGER ledger_event_no_update_or_delete
    BEFORE UPDATE OR DELETE ON ledger_event
    FOR EACH ROW EXECUTE FUNCTION ledger_event_refuse_change();
CREATE TRIGGER ledger_event_no_truncate
    BEFORE TRUNCATE ON ledger_event
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_event_refuse_change();
"""

REMOVE_TRIGGERS = """
DROP TRIGGER IF EXISTS ledger_event_no_truncate ON ledger_event;
DROP TRIGGER IF EXISTS ledger_event_no_update_or_delete ON ledger_event;
DROP FUNCTION IF EXISTS ledger_event_refuse_change();
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]

    operations = [
        VectorExtension(),
        migrations.RunSQL(REFUSE_FUNCTION + INSTALL_TRIGGERS, reverse_sql=REMOVE_TRIGGERS),
    ]
