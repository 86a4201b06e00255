"""Embeddings kept in the row, and the HNSW graph over active memories only.

A 384-d vector is 1,544 bytes, enough to push a memory row past PostgreSQL's 2 kB TOAST
threshold, so it went out of line by default (the vector type's storage is EXTERNAL): an exact
scan of an agent's 10,000 memories then made a TOAST index lookup per row, 28-46 ms against
12 ms with the vectors in the row (bench/memory_scale.py data, one agent of each kind). PLAIN
applies to rows written from now on.

Archived memories are never searched; with the index's condition, archiving a memory (decay,
quota) no longer adds a node to the graph for the row's new version.
"""

import pgvector.django.indexes
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0008_job_schedules'),
        ('memory', '0007_content_store'),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memory_memory ALTER COLUMN embedding SET STORAGE PLAIN",
            reverse_sql="ALTER TABLE memory_memory ALTER COLUMN embedding SET STORAGE EXTERNAL",
        ),
        migrations.RemoveIndex(
            model_name='memory',
            name='memory_embedding_hnsw',
        ),
        migrations.AddIndex(
            model_name='memory',
            index=pgvector.django.indexes.HnswIndex(condition=models.Q(('archived_at__isnull', True)), ef_construction=64, fields=['embedding'], m=16, name='memory_embedding_hnsw', opclasses=['vector_cosine_ops']),
        ),
    ]
