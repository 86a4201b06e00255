"""A memory's keyword document is made as the row is inserted (memory.search.keyword_index).

Before, a store inserted the row without a document and then updated it: a second version of
the row, and since the document is indexed, a second entry in every index of the table, the HNSW
graph included, made while holding the tenant's lock. The window's SQL moves into one function,
which the trigger and the refresh of neighbours' documents both call.
"""

from django.db import migrations

DOCUMENT_FUNCTIONS = """
-- A memory's keyword document: its own line, dated and weighted A, and up to two lines on each
-- side of it in its session, by (occurred_at, id).
CREATE FUNCTION memory_search_document(
    tenant bigint, agent bigint, session text, occurred timestamptz, memory bigint,
    metadata jsonb, speaker text, role text, content text
) RETURNS tsvector LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT setweight(to_tsvector('english',
               '[' || to_char(occurred AT TIME ZONE 'UTC', 'FMDD FMMonth YYYY') || '] '
               || memory_search_line(metadata, speaker, role, content)), 'A')
        || to_tsvector('english', concat_ws(' ',
               (SELECT string_agg(line, ' ' ORDER BY occurred_at, id) FROM (
                    SELECT p.occurred_at, p.id,
                           memory_search_line(p.metadata, p.speaker, p.role, p.content) AS line
                    FROM memory_memory AS p
                    WHERE session <> '' AND p.tenant_id = tenant AND p.agent_id = agent
                      AND p.session_id = session AND (p.occurred_at, p.id) < (occurred, memory)
                    ORDER BY p.occurred_at DESC, p.id DESC LIMIT 2) AS before),
               (SELECT string_agg(line, ' ' ORDER BY occurred_at, id) FROM (
                    SELECT p.occurred_at, p.id,
                           memory_search_line(p.metadata, p.speaker, p.role, p.content) AS line
                    FROM memory_memory AS p
                    WHERE session <> '' AND p.tenant_id = tenant AND p.agent_id = agent
                      AND p.session_id = session AND (p.occurred_at, p.id) > (occurred, memory)
                    ORDER BY p.occurred_at, p.id LIMIT 2) AS after)))
$$;

-- Okapi BM25's document length: the document's lexeme positions.
CREATE FUNCTION memory_search_length(document tsvector) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(array_length(u.positions, 1)), 0)::integer FROM unnest(document) AS u
$$;

-- A row inserted without a document gets one. Rows of the same statement may not see each
-- other here; the writer refreshes the documents of new rows that neighbour other new rows.
CREATE FUNCTION memory_search_document_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.search_vector := memory_search_document(
        NEW.tenant_id, NEW.agent_id, NEW.session_id, NEW.occurred_at, NEW.id,
        NEW.metadata, NEW.speaker, NEW.role, NEW.content);
    NEW.search_length := memory_search_length(NEW.search_vector);
    RETURN NEW;
END
$$;

CREATE TRIGGER memory_search_document_insert BEFORE INSERT ON memory_memory
    FOR EACH ROW WHEN (NEW.search_vector IS NULL)
    EXECUTE FUNCTION memory_search_document_fill();
"""

DROP_DOCUMENT_FUNCTIONS = """
DROP TRIGGER IF EXISTS memory_search_document_insert ON memory_memory;
DROP FUNCTION IF EXISTS memory_search_document_fill();
DROP FUNCTION IF EXISTS memory_search_length(tsvector);
DROP FUNCTION IF EXISTS memory_search_document(
    bigint, bigint, text, timestamptz, bigint, jsonb, text, text, text);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0023_gin_written_in_place"),
    ]

    operations = [
        migrations.RunSQL(DOCUMENT_FUNCTIONS, DROP_DOCUMENT_FUNCTIONS),
    ]
