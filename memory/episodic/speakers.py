"""Who said a memory when the client did not say: the names a conversation's turns address.

Many clients store a conversation's turns as content alone, with no speaker in the metadata.
The speaker still shows in the conversation itself: people address each other by name ("Hey
Mel!", "Thanks, Caroline.", "That's great, Jon!"), and in a conversation between two people the
one a turn addresses is the one who speaks the turns before and after it. Giving the embedder
and the keyword index that name instead of the bare role takes LoCoMo dev stored without speaker
metadata from R@10 0.790 to 0.815 held out, the figure with the speakers given
(docs/retrieval-research.md, "Speakers the client did not send").

The inference is deliberately narrow: it names a turn's speaker only when the session reads as
two people taking turns, each addressed by the turns of one side only, and leaves the
role otherwise (notes, a user talking to an assistant, a group).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

_NAME = r"([A-Z][a-z]+(?:-[A-Z][a-z]+)?)"
# Where a name is a vocative: after a greeting or an interjection at the start ("Hey Mel",
# "Thanks, Caroline"), closing a clause after a comma ("That's great, Jon!"), or opening the
# turn on its own ("Gina, you did it!").
_ADDRESS_PATTERNS = (
    re.compile(
        r"^(?:Hey|Hi|Hello|Hiya|Yo|Thanks|Thank you|Wow|Whoa|Woah|Oh|Aw+|Congrats|"
        r"Congratulations|Morning|Good morning|Good evening|Sorry|Yeah|Yes|Ah|Dear)"
        r"[,!]? " + _NAME + r"\b"
    ),
    re.compile(r", " + _NAME + r"[!?.,]"),
    re.compile(r"^" + _NAME + r"[,!] "),
)
# A word written in lower case: a capitalised form of it in a vocative's place is no name.
_LOWER_WORD = re.compile(r"\b[a-z][a-z-]*\b")
# Interjections in those places, which are no one's name and, unlike most other capitalised
# words there ("Those, ...", "Exciting!"), are rarely written in lower case elsewhere.
_INTERJECTION = re.compile(
    r"(?:Yep|Yup|Yeah|Yes|Nope|No|Oh|Ohh|Aw+|Ah|Ha|Haha|Hehe|Lol|Wow|Woah|Whoa|Woohoo|Yay|Oof|"
    r"Ouch|Ugh|Hmm|Mm+|Yum|Bye|Cheers|Congrats|Thanks|Hey|Hi|Hello|Okay|Ok|Btw|Omg|Agreed|Sure|"
    r"Totally|Absolutely|Definitely|Exactly|Right|True|Cool|Nice|Great|Awesome|Amazing|Sorry)"
)
# A name speaks one side of a session when the other side addresses it and its own side hardly
# ever does (at most this share of its addresses); the side is named when that happened
# MIN_ADDRESSES times, or once when the other side is named too. Set on how often the dev
# sessions' turns are named, and named wrongly, not on recall (docs/retrieval-research.md).
MIN_ADDRESSES = 2
MAX_STRAY_SHARE = 0.2


def addressed_names(content: str) -> list[str]:
    """The names this text addresses, repeats kept."""
    names = []
    for pattern in _ADDRESS_PATTERNS:
        for match in pattern.finditer(content):
            name = match.group(1)
            if not _INTERJECTION.fullmatch(name):
                names.append(name)
    return names


def _canonical(names: Counter[str]) -> dict[str, str]:
    """Short forms to the longest name they begin ("Mel" -> "Melanie"), the most used one when
    several qualify: a question names a person in full."""
    out = {}
    for name in names:
        longer = [other for other in names if other != name and other.startswith(name)]
        out[name] = max(longer, key=lambda other: (names[other], other)) if longer else name
    return out


Turn = tuple[str | None, str]
"""A memory of a session as the inference reads it: (the speaker its client gave or None, its
content)."""


def sessions_speakers(sessions: Sequence[Sequence[Turn]]) -> list[list[str | None]]:
    """Each turn's speaker, for sessions whose turns are given in order.

    A known speaker is kept. The others are named when their session reads as two people taking
    turns: a name addressed by the turns of one parity (with at most ``MAX_STRAY_SHARE`` of its
    addresses from the other parity) speaks the turns of the other parity; known speakers place
    their names the same way. Each side takes its most addressed such name (ties: the name
    addressed most across all the sessions given), and keeps it when it was addressed
    ``MIN_ADDRESSES`` times or the other side is named too (two people, each addressing the
    other); none when both sides would take the same name. The sessions are read together for
    what no one session shows: which capitalised words are names at all (those never written in
    lower case) and which full name a short form stands for.
    """
    words = {
        word for turns in sessions for _, content in turns for word in _LOWER_WORD.findall(content)
    }
    addressed = [
        [
            [name for name in addressed_names(content) if name.lower() not in words]
            for _, content in turns
        ]
        for turns in sessions
    ]
    everyone = Counter(name for session in addressed for names in session for name in names)
    everyone.update(known for turns in sessions for known, _ in turns if known)
    canonical = _canonical(everyone)
    overall = Counter({name: 0 for name in canonical.values()})
    for name, count in everyone.items():
        overall[canonical[name]] += count
    return [
        _session_speakers(
            turns, [[canonical[n] for n in names] for names in session], overall, canonical
        )
        for turns, session in zip(sessions, addressed, strict=True)
    ]


def _session_speakers(
    turns: Sequence[Turn],
    addressed: list[list[str]],
    overall: Counter[str],
    canonical: dict[str, str],
) -> list[str | None]:
    # Per name, the turns of each parity that address it; a known speaker counts as addressed
    # from the other side.
    by_side: dict[str, list[int]] = {}
    for position, ((known, _), turn_names) in enumerate(zip(turns, addressed, strict=True)):
        side = position % 2
        if known:
            by_side.setdefault(canonical.get(known, known), [0, 0])[1 - side] += MIN_ADDRESSES
        for name in set(turn_names):
            by_side.setdefault(name, [0, 0])[side] += 1
    speaks: list[tuple[int, int, str] | None] = [None, None]
    for name, counts in by_side.items():
        addressing_side = 0 if counts[0] >= counts[1] else 1
        most, stray = counts[addressing_side], counts[1 - addressing_side]
        if stray > MAX_STRAY_SHARE * (most + stray):
            continue
        entry = (most, overall[name], name)
        side = 1 - addressing_side
        if speaks[side] is None or entry > speaks[side]:  # type: ignore[operator]
            speaks[side] = entry
    both = speaks[0] is not None and speaks[1] is not None
    side_names = [
        entry[2] if entry and (entry[0] >= MIN_ADDRESSES or both) else None for entry in speaks
    ]
    if side_names[0] is not None and side_names[0] == side_names[1]:
        side_names = [None, None]
    return [known or side_names[position % 2] for position, (known, _) in enumerate(turns)]
