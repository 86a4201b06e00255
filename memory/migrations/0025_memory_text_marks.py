"""Whether a memory's text carries a time and whether it asks a question, kept in two columns by
a trigger instead of matched by regular expression in every search (3.6 ms of PostgreSQL per
question asking when, on a LoCoMo conversation's ~200 candidates).

Plain nullable columns, not stored generated ones: adding a generated column rewrites the table
and rebuilds every index, the HNSW graph included, under a lock that stops reads too. Rows
written before this migration keep null, and the search matches their text as it did
(``coalesce``), so nothing has to be filled in. The patterns are written here as they were:
memory.search.temporal.TIME_EXPRESSION_SQL_PATTERN and memory.search.legs.QUESTION_SQL_PATTERN
must stay equal to them (tests/memory/test_search.py), a change of either being a migration of
its own.
"""

from django.db import migrations, models

TEXT_MARKS = r"""
CREATE FUNCTION memory_mentions_time(content text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT content ~* '\m(yesterday|today|tonight|tomorrow|ago|recently|lately|since|weekend|(last|next|this|past|coming|previous) (week|month|year|night|time|summer|winter|spring|fall|autumn|morning|evening)|(mon|tues|wednes|thurs|fri|satur|sun)days?|january|february|march|april|june|july|august|september|october|november|december|(19|20)[0-9][0-9]|([0-9]+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|few|couple of|several) (years?|months?|weeks?|days?|hours?))\M'
$$;
CREATE FUNCTION memory_asks_question(content text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT content ~ '\?[\s\"''\u201d\u2019)]*(\[[^]]*\]\s*)?$'
$$;
CREATE FUNCTION memory_text_marks_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.mentions_time := memory_mentions_time(NEW.content);
    NEW.asks_question := memory_asks_question(NEW.content);
    RETURN NEW;
END
$$;
CREATE TRIGGER memory_text_marks BEFORE INSERT OR UPDATE OF content ON memory_memory
    FOR EACH ROW EXECUTE FUNCTION memory_text_marks_fill();
"""
DROP_TEXT_MARKS = """
DROP TRIGGER IF EXISTS memory_text_marks ON memory_memory;
DROP FUNCTION IF EXISTS memory_text_marks_fill();
DROP FUNCTION IF EXISTS memory_asks_question(text);
DROP FUNCTION IF EXISTS memory_mentions_time(text);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0024_search_document_at_insert"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="mentions_time",
            field=models.BooleanField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="memory",
            name="asks_question",
            field=models.BooleanField(editable=False, null=True),
        ),
        migrations.RunSQL(TEXT_MARKS, DROP_TEXT_MARKS),
    ]
