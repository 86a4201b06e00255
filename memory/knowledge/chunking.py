"""Splitting a knowledge-base article into chunks for search (SPEC 6).

Pure functions of the text, so publishing, editing and a rebuild from the ledger all cut a
document at the same places.

The body is read as Markdown-ish text: blank lines separate paragraphs, ``#`` lines are section
headings, and fenced code blocks (```` ``` ```` or ``~~~``) stay whole, headings-looking lines and
blank lines inside them included. Paragraphs of one section are packed into chunks of at most
``MAX_CHUNK_CHARS``; a heading always starts a new chunk, so a chunk never straddles two sections.
A paragraph longer than the limit is cut between sentences, and a sentence longer than the limit
between words (a single unbroken run of characters, at the limit).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

MAX_CHUNK_CHARS = 800
HEADING_SEPARATOR = " > "

_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
# A sentence ends at . ! or ? (optionally followed by a closing quote or bracket) and whitespace.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'\u201d\u2019)\]])\s+")


@dataclass(frozen=True)
class ChunkDraft:
    position: int
    heading: str
    text: str

    @property
    def embedding_text(self) -> str:
        """What the embedder sees: the chunk under its heading."""
        return f"{self.heading}\n\n{self.text}"


@dataclass(frozen=True)
class _Block:
    section: int  # how many headings came before it: sections with the same name stay apart
    heading: str | None  # the heading it sits under; None before the first heading
    text: str
    code: bool = False


def _blocks(body: str) -> Iterator[_Block]:
    """Paragraphs and code blocks, each with the section it belongs to."""
    section, heading = 0, None
    lines: list[str] = []
    fence: str | None = None

    def flush() -> Iterator[_Block]:
        text = "\n".join(lines).strip("\n")
        lines.clear()
        if text.strip():
            yield _Block(section, heading, text, code=fence is not None)

    for line in body.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if fence is not None:
            lines.append(line)
            if line.strip().startswith(fence):
                yield from flush()
                fence = None
            continue
        opened = _FENCE.match(line)
        if opened:
            yield from flush()
            fence = opened.group(1)
            lines.append(line)
            continue
        found = _HEADING.match(line)
        if found:
            yield from flush()
            section, heading = section + 1, found.group(2) or None
            continue
        if not line.strip():
            yield from flush()
            continue
        lines.append(line.rstrip())
    yield from flush()  # an unclosed fence runs to the end of the body


def _hard_split(text: str, limit: int) -> Iterator[str]:
    """Cut text longer than ``limit`` between words, or at the limit inside one long word."""
    rest = text.strip()
    while len(rest) > limit:
        cut = rest.rfind(" ", 0, limit + 1)
        if cut <= 0:
            cut = limit
        yield rest[:cut].rstrip()
        rest = rest[cut:].lstrip()
    if rest:
        yield rest


def _packed(parts: Iterator[str], limit: int, joiner: str) -> Iterator[str]:
    current = ""
    for part in parts:
        if current and len(current) + len(joiner) + len(part) <= limit:
            current = current + joiner + part
            continue
        if current:
            yield current
        current = part
    if current:
        yield current


def _pieces(block: _Block, limit: int) -> Iterator[str]:
    """A block as pieces of at most ``limit`` characters: prose cut between sentences, code
    between lines (its line breaks kept)."""
    if len(block.text) <= limit:
        yield block.text
    elif block.code:
        lines = (
            piece
            for line in block.text.split("\n")
            for piece in ([line] if len(line) <= limit else _hard_split(line, limit))
        )
        yield from _packed(lines, limit, "\n")
    else:
        sentences = (
            piece
            for sentence in _SENTENCE_END.split(block.text)
            if sentence.strip()
            for piece in _hard_split(" ".join(sentence.split()), limit)
        )
        yield from _packed(sentences, limit, " ")


def chunk_body(*, title: str, body: str, limit: int = MAX_CHUNK_CHARS) -> list[ChunkDraft]:
    """The chunks of an article, in document order, each at most ``limit`` characters."""
    chunks: list[ChunkDraft] = []
    current: list[str] = []
    heading = title
    section = 0

    def close() -> None:
        if current:
            chunks.append(ChunkDraft(len(chunks), heading, "\n\n".join(current)))
            current.clear()

    for block in _blocks(body):
        if block.section != section:
            close()
            section = block.section
            heading = title if block.heading is None else title + HEADING_SEPARATOR + block.heading
        for piece in _pieces(block, limit):
            size = sum(len(text) + 2 for text in current) + len(piece)
            if current and size > limit:
                close()
            current.append(piece)
    close()
    return chunks
