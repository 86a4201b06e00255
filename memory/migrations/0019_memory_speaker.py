"""Memories' speaker as search reads it (issue 23): the client's metadata speaker, else the one
the session shows (memory.episodic.speakers). The keyword line takes it where the metadata has
none; rows stored before keep a blank speaker and their documents as they were."""

from django.db import migrations, models

SEARCH_LINE = """
DROP FUNCTION IF EXISTS memory_search_line(jsonb, text, text);
-- One memory as a line of a keyword document: "speaker: content", the speaker as the embedder
-- sees it (memory.episodic.services.memory_embedding_text): the metadata's, else the one
-- inferred from its session, else the role.
CREATE OR REPLACE FUNCTION memory_search_line(metadata jsonb, speaker text, role text, content text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(nullif(metadata ->> 'speaker', ''), nullif(speaker, ''), role) || ': ' || content
$$;
"""
PREVIOUS_SEARCH_LINE = """
DROP FUNCTION IF EXISTS memory_search_line(jsonb, text, text, text);
CREATE OR REPLACE FUNCTION memory_search_line(metadata jsonb, role text, content text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(nullif(metadata ->> 'speaker', ''), role) || ': ' || content
$$;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0018_filter_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='memory',
            name='speaker',
            field=models.CharField(blank=True, default='', max_length=200),
        ),
        migrations.RunSQL(SEARCH_LINE, PREVIOUS_SEARCH_LINE),
    ]
