"""Index the ledger's memory events by memory, for a memory's history (issue 22).

``GET /api/v1/memories/{id}/history/`` finds the memory's ``memory.stored`` event and then its
later events by ``payload -> 'memory_id'``; without an index each lookup read every
``memory.stored`` event of the tenant (about 0.5 s at 100,000 memories). Partial: only events that
name one memory are indexed, so other events' appends pay nothing. The ledger table is the
ledger app's, but only memory reads it this way, so memory owns the index.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0016_memory_validity"),
        ("ledger", "0013_display_text_by_kind"),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE INDEX IF NOT EXISTS ledger_event_memory_history ON ledger_event "
            "(tenant_id, (payload -> 'memory_id'), seq) WHERE payload ? 'memory_id'",
            reverse_sql="DROP INDEX IF EXISTS ledger_event_memory_history",
        ),
    ]
