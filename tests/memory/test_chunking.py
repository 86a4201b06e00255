"""Where a knowledge-base article is cut into search chunks."""

from __future__ import annotations

from memory.knowledge.chunking import MAX_CHUNK_CHARS, chunk_body


def sentence(i: int) -> str:
    return f"Sentence number {i:03d} explains one more rule of the refund desk in detail."


def test_short_paragraphs_are_packed_into_one_chunk_under_the_title():
    chunks = chunk_body(title="Refunds", body="First paragraph.\n\nSecond paragraph.\n")

    assert [(c.position, c.heading, c.text) for c in chunks] == [
        (0, "Refunds", "First paragraph.\n\nSecond paragraph.")
    ]


def test_a_heading_starts_a_new_chunk_named_after_its_section():
    body = "Intro.\n\n# Exceptions\nGift cards are final.\n\n## Gift cards\n\nNo refunds."

    chunks = chunk_body(title="Refunds", body=body)

    assert [(c.heading, c.text) for c in chunks] == [
        ("Refunds", "Intro."),
        ("Refunds > Exceptions", "Gift cards are final."),
        ("Refunds > Gift cards", "No refunds."),
    ]


def test_two_sections_with_the_same_name_stay_apart():
    chunks = chunk_body(title="T", body="# Notes\none\n\n# Notes\ntwo")

    assert [c.text for c in chunks] == ["one", "two"]


def test_paragraphs_fill_a_chunk_up_to_the_limit_and_never_beyond():
    paragraph = "x" * 399
    # Two paragraphs and their separator make exactly 800 characters; a third does not fit.
    chunks = chunk_body(title="T", body="\n\n".join([paragraph] * 3))

    assert [len(c.text) for c in chunks] == [MAX_CHUNK_CHARS, 399]


def test_a_long_paragraph_is_cut_between_sentences():
    body = " ".join(sentence(i) for i in range(40))

    chunks = chunk_body(title="T", body=body)

    assert len(chunks) > 1
    assert all(len(c.text) <= MAX_CHUNK_CHARS for c in chunks)
    assert all(c.text.startswith("Sentence number") and c.text.endswith(".") for c in chunks)
    assert " ".join(c.text for c in chunks) == body


def test_a_sentence_ending_in_a_quote_keeps_its_quote():
    body = 'He said "stop." ' + " ".join(sentence(i) for i in range(20))

    first = chunk_body(title="T", body=body)[0]

    assert first.text.startswith('He said "stop." Sentence')


def test_a_sentence_longer_than_the_limit_is_cut_between_words():
    words = " ".join(f"word{i}" for i in range(400))

    chunks = chunk_body(title="T", body=words)

    assert all(len(c.text) <= MAX_CHUNK_CHARS for c in chunks)
    assert " ".join(c.text for c in chunks) == words
    assert all(not c.text.startswith(" ") and not c.text.endswith(" ") for c in chunks)


def test_one_unbroken_run_of_characters_is_cut_at_the_limit():
    chunks = chunk_body(title="T", body="a" * 2000)

    assert [len(c.text) for c in chunks] == [800, 800, 400]


def test_a_code_block_stays_whole_with_its_blank_lines_and_comment_lines():
    code = "```bash\n# not a heading\n\nrm -rf build\n```"

    chunks = chunk_body(title="Deploy", body=f"# Steps\nRun this:\n\n{code}\n\nDone.")

    assert [(c.heading, c.text) for c in chunks] == [
        ("Deploy > Steps", f"Run this:\n\n{code}\n\nDone.")
    ]


def test_a_long_code_block_is_cut_between_lines():
    lines = [f"step_{i:03d} --flag value" for i in range(100)]
    code = "```\n" + "\n".join(lines) + "\n```"

    chunks = chunk_body(title="T", body=code)

    assert len(chunks) > 1
    assert all(len(c.text) <= MAX_CHUNK_CHARS for c in chunks)
    assert "\n".join(c.text for c in chunks) == code


def test_windows_line_endings_split_like_unix_ones():
    assert chunk_body(title="T", body="a\r\n\r\n# H\r\nb") == chunk_body(
        title="T", body="a\n\n# H\nb"
    )


def test_headings_without_text_make_no_chunks():
    assert chunk_body(title="T", body="# One\n\n## Two\n") == []


def test_the_embedder_sees_the_heading_above_the_text():
    chunk = chunk_body(title="Refunds", body="# Exceptions\nGift cards are final.")[0]

    assert chunk.embedding_text == "Refunds > Exceptions\n\nGift cards are final."
