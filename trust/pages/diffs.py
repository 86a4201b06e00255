"""A word-level diff of an override's two texts, for the review flow's detail view.

Both texts are hostile input (the agent's output and a person's decision): the diff is a list of
plain-text segments, and only the template, which escapes each one, turns them into markup
(``<del>`` for the agent's words the decision dropped, ``<ins>`` for the words it added).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher

# Each word with the whitespace after it (and any leading whitespace alone): words are compared
# without their whitespace, so a changed space is not a changed word.
_TOKENS = re.compile(r"\S+\s*|\s+")
# Past this many tokens per side the diff would cost more than the page (difflib is quadratic
# in the worst case); the texts are still shown whole beside each other. With autojunk, words
# making more than 1% of a long decision start no match (bench/word_diff_bench.py: 3,300 words
# in 4-40 ms CPU, where without it 20 repeated words took 340-370 ms; on prose it marks about
# the words that changed).
DIFF_MAX_TOKENS = 5_000


@dataclass(frozen=True)
class Segment:
    op: str  # "same", "del" (only in the agent's output) or "ins" (only in the decision)
    text: str


@dataclass(frozen=True)
class WordDiff:
    segments: list[Segment]
    removed: int  # words of the agent's output the decision dropped
    added: int  # words the decision added
    too_long: bool = False


def _words(tokens: list[str]) -> int:
    return sum(1 for token in tokens if not token.isspace())


def _keys(tokens: list[str]) -> list[str]:
    return [token.rstrip() for token in tokens]


def word_diff(before: str, after: str) -> WordDiff:
    """What changed from ``before`` to ``after``, word by word, in reading order."""
    old, new = _TOKENS.findall(before), _TOKENS.findall(after)
    if len(old) > DIFF_MAX_TOKENS or len(new) > DIFF_MAX_TOKENS:
        return WordDiff(segments=[], removed=0, added=0, too_long=True)
    segments: list[Segment] = []
    removed = added = 0

    def add(op: str, tokens: list[str]) -> None:
        if not tokens:
            return
        text = "".join(tokens)
        if segments and segments[-1].op == op:
            segments[-1] = Segment(op, segments[-1].text + text)
        else:
            segments.append(Segment(op, text))

    matcher = SequenceMatcher(a=_keys(old), b=_keys(new))
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            add("same", old[i1:i2])
            continue
        add("del", old[i1:i2])
        add("ins", new[j1:j2])
        removed += _words(old[i1:i2])
        added += _words(new[j1:j2])
    return WordDiff(segments=segments, removed=removed, added=added)
