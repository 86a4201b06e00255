"""The rule that tells whether a new memory states the same thing about the same subject as an
older one, with a different value ("I prefer invoices in EUR" -> "Now I prefer GBP for
invoices"): pure functions, tuned by settings.

Two statements are about the same subject when they are about the same holder (the speaker,
"we", a relation such as "my parents", or someone else) and fill the same single-valued slot of a
person (their role, employer, home, name, e-mail, phone: "I work as a designer" / "I'm now a
product manager"), or when they share at least ``min_shared`` subject words: content words left
once stop words and change words ("now", "instead", "switched") are removed, so "invoices" is
shared and "EUR"/"GBP" are the values that differ; a name both capitalise does not count on
its own. They supersede when, besides, their vectors
are close (cosine at least ``threshold``, a neighbour of the search's own embedding) and their
words differ (a restatement changes nothing). ``threshold`` is chosen by cross-validation over
bench/supersession.py's chains of changing facts (docs/benchmarks.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WORD = re.compile(r"[a-z0-9][a-z0-9@._'-]*[a-z0-9]|[a-z0-9]")

STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i i'm
    i've i'd i'll if in into is it it's its itself just let's me more most my myself no
    nor not of off on once only or other our ours ourselves out over own same she should
    so some such than that that's the their theirs them themselves then there these they
    this those through to too under until up very was we we're were what when where which
    while who whom why will with would you you're your yours yourself yourselves us also
    """.split()  # noqa: SIM905 (a word list reads best as words)
)
# Words that announce a change rather than name its subject.
CHANGE_WORDS = frozenset(
    """
    now actually currently anymore instead new newer latest update updated updates change
    changed changes switch switched switching moved longer since going today rather please
    remember note correction correct fact turns turned
    """.split()  # noqa: SIM905 (a word list reads best as words)
)
# Verbs of liking and using: they frame a statement's subject without naming it ("I prefer
# invoices in EUR" and "I prefer meetings in the morning" are about different things).
FRAME_WORDS = frozenset(
    """
    prefer preferred like liked love enjoy want wanted need needed use using used favorite
    favourite usually always never get go make take think feel
    """.split()  # noqa: SIM905 (a word list reads best as words)
)
# Single-valued slots of a person (or of a named someone): one value holds at a time.
SLOTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "role",
        re.compile(
            r"\b(?:i am|i'm|im) (?:now |currently |actually )?(?:a|an|the) "
            r"|\bworks? as\b|\bworking as\b|\bmy (?:new )?(?:role|job|title|position) (?:is|as)\b"
            r"|\bpromoted to\b"
        ),
    ),
    (
        "employer",
        re.compile(r"\bworks? (?:at|for)\b|\bworking (?:at|for)\b|\bjoined\b|\bmy employer\b"),
    ),
    (
        "home",
        re.compile(
            r"\blives? in\b|\bliving in\b|\bmoved to\b|\bbased in\b|\bmy (?:home|address)\b"
            r"|\brelocated to\b"
        ),
    ),
    ("name", re.compile(r"\bmy name is\b|\bcall me\b|\bgoes by\b")),
    ("email", re.compile(r"\b(?:e-?mail|email address)\b")),
    ("phone", re.compile(r"\b(?:phone|mobile) (?:number )?is\b|\bphone number\b")),
)


# Whose fact it is: "I live in Manchester" and "My parents live in Manchester" are about
# different people, whatever their words share; so are "My shoe size is 42" and "My son's shoe
# size is 38": a possessive noun phrase ("my son's", "our team's", "my older brother's") names
# its own holder.
FIRST_PERSON = frozenset({"i", "i'm", "im", "i've", "i'd", "i'll", "me", "my", "mine", "myself"})
FIRST_PLURAL = frozenset({"we", "we're", "we've", "we'll", "our", "ours", "us", "ourselves"})
POSSESSIVES = frozenset({"my", "our", "his", "her", "their", "your"})
RELATIONS = frozenset(
    """parent mother father mom dad sister brother wife husband partner daughter son kid child
    children colleague coworker co-worker manager boss friend neighbour neighbor cousin aunt
    uncle grandmother grandfather assistant""".split()  # noqa: SIM905 (a word list)
)
# How many words (adjectives: "my older brother's", "my best friend's") may stand between a
# possessive and the noun whose fact it is.
HOLDER_REACH = 3
# Words as written, case kept, a trailing possessive apostrophe too ("parents'"); curly
# apostrophes are read as straight ones.
_TOKEN = re.compile(r"[A-Za-z0-9][\w@.'-]*[\w']|[A-Za-z0-9]")
# A capitalised word (not an acronym: "CI" and "EUR" name topics and values).
CAPITALISED = re.compile(r"(?<![\w'])[A-Z][a-z]+(?![\w'])")


def _possessed(token: str, following: str | None) -> str | None:
    """The noun a token names as a holder in its possessive form ("son's", "parents'"), else
    None. "X's" is also "X is" ("My name's Dana", "my role's a ..."): read as a possessive only
    when a lower-case word that is no stop word and holds no digit or @ follows."""
    lowered = token.lower()
    if lowered.endswith("s'"):
        return lowered[:-1]
    if not lowered.endswith("'s") or following is None:
        return None
    if following[0].isupper() or following.lower() in STOP_WORDS:
        return None
    if any(c.isdigit() or c == "@" for c in following):
        return None
    return lowered[:-2]


def _singular(word: str) -> str:
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def holder(text: str) -> str:
    """Whose fact a statement states: "self", "we", "rel:<relation or possessor>" or "other"."""
    tokens = _TOKEN.findall(text.replace("\u2019", "'"))
    for at, token in enumerate(tokens):
        if token.lower() not in POSSESSIVES:
            continue
        for offset, word in enumerate(tokens[at + 1 : at + 1 + HOLDER_REACH], start=at + 1):
            following = tokens[offset + 1] if offset + 1 < len(tokens) else None
            possessor = _possessed(word, following)
            noun = _singular(possessor if possessor is not None else word.lower())
            if noun in RELATIONS or possessor is not None:
                return f"rel:{noun}"
            if word.lower() in STOP_WORDS:
                break
    found = words(text)
    if FIRST_PERSON.intersection(found):
        return "self"
    if FIRST_PLURAL.intersection(found):
        return "we"
    return "other"


def _capitalised(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The capitalised words of a text: all, and those after its first word."""
    found = [(m.start(), m.group()) for m in CAPITALISED.finditer(text)]
    first = len(text) - len(text.lstrip())
    every = frozenset(words(" ".join(w for _, w in found)))
    inner = frozenset(words(" ".join(w for at, w in found if at > first)))
    return every, inner


def shared_names(a: str, b: str) -> frozenset[str]:
    """Names both texts capitalise, one of them inside a sentence (so not just as its first
    word): "Dana" in "Dana owns the dashboards" and "The on-call engineer is Dana"."""
    every_a, inner_a = _capitalised(a)
    every_b, inner_b = _capitalised(b)
    return (every_a & every_b) & (inner_a | inner_b)


def words(text: str) -> list[str]:
    """Lower-case words, a plural's trailing s removed ("invoices" -> "invoice")."""
    found = []
    for word in WORD.findall(text.lower()):
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        found.append(word)
    return found


def content_words(text: str) -> frozenset[str]:
    return frozenset(
        w for w in words(text) if w not in STOP_WORDS and w not in CHANGE_WORDS and len(w) > 1
    )


def slots(text: str) -> frozenset[str]:
    """The single-valued slots a statement fills."""
    lowered = text.lower()
    return frozenset(name for name, pattern in SLOTS if pattern.search(lowered))


@dataclass(frozen=True)
class RuleSettings:
    threshold: float
    min_shared: int = 1


@dataclass(frozen=True)
class RuleVerdict:
    supersedes: bool
    # Why, for the response and the ledger: "same slot: role", "shared: invoice", ...
    reason: str


def rule_verdict(*, new: str, old: str, similarity: float, rule: RuleSettings) -> RuleVerdict:
    """Whether ``new`` supersedes ``old`` by the rule (``similarity``: their cosine)."""
    new_words, old_words = content_words(new), content_words(old)
    if new_words == old_words:
        return RuleVerdict(False, "restatement")
    if similarity < rule.threshold:
        return RuleVerdict(False, f"similarity {similarity:.2f} under {rule.threshold:.2f}")
    if holder(new) != holder(old):
        return RuleVerdict(False, f"about {holder(new)}, not {holder(old)}")
    same_slots = slots(new) & slots(old)
    if same_slots:
        return RuleVerdict(True, "same slot: " + ", ".join(sorted(same_slots)))
    # A name says who or what, not which of their facts: "Dana owns the billing dashboards"
    # and "This week's on-call engineer is Dana" both hold.
    shared = (new_words & old_words) - FRAME_WORDS - shared_names(new, old)
    if len(shared) >= rule.min_shared:
        return RuleVerdict(True, "shared: " + ", ".join(sorted(shared)))
    return RuleVerdict(False, "no shared subject")
