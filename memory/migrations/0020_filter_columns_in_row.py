"""The columns filters read stay in the row: metadata and tags STORAGE MAIN.

With the embedding in the row (PLAIN, 0008: 1,544 bytes), a memory row has about 500 bytes left
under PostgreSQL's 2 kB TOAST target once its keyword document is written. The toaster then moves
out of line whatever else is largest: the keyword document, the content, and for a fifth of the
rows (bench/memory_scale.py data) the metadata too. A metadata filter's rows come from the GIN
index memory_metadata, which is lossy, so each row is checked again in the heap, and each
condition of the check fetched the metadata from TOAST anew: `customer in five` read 3.5 buffers
per row (18,097 for 5,099 rows at 1,100,000 memories). MAIN keeps a value in the row unless the
row still does not fit a page once the other columns are out of line; tags are read by filters
the same way.

Applies to rows written from now on; an out-of-line value already written stays there until its
row is rewritten (`VACUUM FULL memory_memory`, or an update of the value).
"""

from django.db import migrations

COLUMNS = ("metadata", "tags")


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0019_memory_speaker'),
    ]

    operations = [
        migrations.RunSQL(
            f"ALTER TABLE memory_memory ALTER COLUMN {column} SET STORAGE MAIN",
            reverse_sql=f"ALTER TABLE memory_memory ALTER COLUMN {column} SET STORAGE EXTENDED",
        )
        for column in COLUMNS
    ]
