"""Leave room in each memory page for the row's next version.

Archiving (decay, quota) and the retrieval statistics update memories in place, and none of
those columns is indexed: with free space on the page PostgreSQL keeps the new version there
(a HOT update) and touches none of the table's nine indexes, the HNSW graph included, where a
full page means an entry in every one of them: 10 WAL records per archived row on
bench/jobs_bench.py's data (31 µs a row), and a new graph node per retrieved memory. New pages
get the room; existing ones as they are rewritten.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0007_content_store"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memory_memory SET (fillfactor = 85)",
            reverse_sql="ALTER TABLE memory_memory RESET (fillfactor)",
        ),
    ]
