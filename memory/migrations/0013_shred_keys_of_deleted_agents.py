"""Destroy the memory keys that agents deleted before issue 18 left behind.

``agent_delete`` used to log ``agent.deleted`` and let the cascade take the agent's memories, but
a key is linked to its memory by id only, so the keys stayed and the content sealed in the
memories' ``memory.stored`` events stayed readable. This destroys the key of every memory whose
agent the ledger records as deleted and whose row is gone, as the deletion does now
(``memory.services.agent_memory_keys_shred``). Plain SQL over the tables as they are at this
point, so later changes to the models cannot break it; running it again finds nothing.
"""

from django.db import migrations

SHRED_KEYS_OF_DELETED_AGENTS = """
DELETE FROM memory_memorykey AS k
USING ledger_event AS stored
WHERE stored.kind = 'memory.stored'
  AND stored.tenant_id = k.tenant_id
  AND (stored.payload ->> 'memory_id')::bigint = k.memory_id
  AND EXISTS (
      SELECT 1 FROM ledger_event AS deleted
      WHERE deleted.tenant_id = stored.tenant_id
        AND deleted.kind = 'agent.deleted'
        AND deleted.payload -> 'agent_id' = stored.payload -> 'agent_id'
  )
  AND NOT EXISTS (SELECT 1 FROM memory_memory AS m WHERE m.id = k.memory_id)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0008_job_schedules"),
        ("memory", "0012_hnsw_build_list_128"),
    ]

    operations = [
        migrations.RunSQL(SHRED_KEYS_OF_DELETED_AGENTS, reverse_sql=migrations.RunSQL.noop),
    ]
