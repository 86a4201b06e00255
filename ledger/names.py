"""What a name in the ledger may look like: agents' names, and the labels people give things.

An agent's name is its identity in the ledger: an agent-scoped key appends as its agent's name,
recall counts the events with that actor as the agent's own, and people read it on every page. So
one rule decides, here, which names are accepted (``agent_name_problem``, which the agent
services apply, so the API, the admin, the commands, the import and the demo all do), and one key
decides which two names are the same (``agent_name_key``, unique per tenant in the database):

- A name is stored in NFKC form, trimmed, with runs of spaces made one: ``file`` in fullwidth
  letters and ``file`` are one name, stored as ``file``.
- No character that cannot be seen or that changes how the text around it is drawn: the Unicode
  categories Cc (controls), Cf (format: zero-width characters, bidirectional overrides and
  isolates), Co (private use), Cn (unassigned), Cs (surrogates), Zl and Zp (line and paragraph
  separators), spaces other than U+0020 (NFKC turns most of them into one), and the remaining
  default-ignorable characters (variation selectors, Hangul fillers, ...).
- No colon, nor any character that looks like one: every actor that is not an agent is written
  ``<kind>:<name>`` (``human:alice``, ``api_key:amk_…``), so a name with a colon could be read as
  one of them. ``system``, the service's own actor, is refused in any case and look-alike.
- One script (Unicode's Script property; characters common to all scripts, such as digits and
  punctuation, go with any), or Latin with the scripts written together in Chinese, Japanese or
  Korean text: UTS #39's "highly restrictive" level. So ``alpha`` with a Cyrillic first letter
  is refused.
- At least one letter or digit; combining marks only after a base character and at most four in
  a row (UTS #39 section 5.4), so marks cannot pile up over other text.

Two names are the same when their keys are: NFKC and case folding, then UTS #39's skeleton (each
character replaced by the prototype it is confusable with), then case folding again. ``ALPHA``,
``alpha``, ``alpha`` spelt with Cyrillic or Greek look-alikes and ``a1pha`` (a digit one for the
``l``) share one key, so none of them can sit beside another in the same tenant.

The labels people give tenants and API keys only describe; they are not identities, so for them
the rule is the first two points (``label_problem``).

This module imports nothing of ours (the models use it); the services turn a ``NameProblem`` into
a 400 with a stable code.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from importlib import resources

from confusable_homoglyphs import categories

SYSTEM_ACTOR = "system"
# Every actor that is not an agent is written "<kind>:<name>" (human:alice, api_key:amk_…).
ACTOR_KIND_SEPARATOR = ":"
HUMAN_ACTOR_PREFIX = "human" + ACTOR_KIND_SEPARATOR

AGENT_NAME_MAX_LENGTH = 200
# The key of a 200-character name: case folding can triple a character (U+0390 becomes three).
AGENT_NAME_KEY_MAX_LENGTH = 3 * AGENT_NAME_MAX_LENGTH

_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"})
# Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties.txt) outside those categories:
# combining grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian free variation
# selectors, variation selectors. They draw nothing.
_INVISIBLE = frozenset(
    chr(code)
    for first, last in (
        (0x034F, 0x034F),
        (0x115F, 0x1160),
        (0x17B4, 0x17B5),
        (0x180B, 0x180D),
        (0x180F, 0x180F),
        (0x3164, 0x3164),
        (0xFE00, 0xFE0F),
        (0xFFA0, 0xFFA0),
        (0xE0100, 0xE01EF),
    )
    for code in range(first, last + 1)
)
_SCRIPTLESS = frozenset({"COMMON", "INHERITED"})
# UTS #39 5.2 "Highly Restrictive": besides a single script, these sets may be mixed.
_SCRIPTS_WRITTEN_TOGETHER = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)
_MAX_COMBINING_RUN = 4
_SPACES = re.compile(" {2,}")


@dataclass(frozen=True)
class NameProblem:
    reason: str  # stable: empty, too_long, invisible_character, actor_form, reserved, ...
    message: str


# --- Normal form and key -----------------------------------------------------------------------


def name_normal_form(raw: str) -> str:
    """NFKC, trimmed, runs of spaces made one. Accepts anything; the checks come after."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", raw).strip())


def agent_name_key(name: str) -> str:
    """The key two agents of one tenant may not share (see the module docstring)."""
    folded = unicodedata.normalize("NFKC", name.casefold())
    prototypes = _prototypes()
    skeleton = "".join(prototypes.get(char, char) for char in folded)
    return unicodedata.normalize("NFKC", skeleton.casefold())


@cache
def _prototypes() -> dict[str, str]:
    """Each confusable character's prototype (UTS #39), from the confusables table of the
    ``confusable_homoglyphs`` package.

    The table lists for a prototype every character confusable with it, and for each of those
    characters the prototype alone. Where two characters list only each other, either could be
    the prototype; the smaller stands for both, which gives them one key all the same. Loaded on
    first use (a fraction of a second, about a megabyte), not at import.
    """
    text = resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8")
    # The table wraps right-to-left glyphs in direction marks so that they print legibly.
    table = {
        _without_direction_marks(char): [_without_direction_marks(entry["c"]) for entry in entries]
        for char, entries in json.loads(text).items()
    }
    prototypes: dict[str, str] = {}
    for char, homoglyphs in table.items():
        if len(char) != 1 or len(homoglyphs) != 1:
            continue  # a prototype itself (it lists its look-alikes), or a sequence
        target = homoglyphs[0]
        if len(target) == 1 and len(table.get(target, ())) == 1:
            target = min(char, target)
        if target != char:
            prototypes[char] = target
    return prototypes


def _without_direction_marks(text: str) -> str:
    return text.replace("\u200e", "").replace("\u200f", "")


# --- Checks ------------------------------------------------------------------------------------


def _invisible_problem(text: str) -> NameProblem | None:
    for char in text:
        category = unicodedata.category(char)
        if (
            category in _REFUSED_CATEGORIES
            or (category == "Zs" and char != " ")
            or char in _INVISIBLE
        ):
            return NameProblem(
                "invisible_character",
                f"contains {_describe(char)}, a control, format or invisible character; names "
                "may hold only characters a reader can see.",
            )
    return None


def _describe(char: str) -> str:
    return f"U+{ord(char):04X} ({unicodedata.name(char, 'unnamed')})"


def _scripts(text: str) -> set[str]:
    return {str(categories.alias(char)) for char in text} - _SCRIPTLESS


def _mark_problem(text: str) -> NameProblem | None:
    run = 0
    for position, char in enumerate(text):
        if not unicodedata.category(char).startswith("M"):
            run = 0
            continue
        run += 1
        if position == 0 or text[position - 1] == " ":
            return NameProblem(
                "combining_marks", f"starts a word with the combining mark {_describe(char)}."
            )
        if run > _MAX_COMBINING_RUN:
            return NameProblem(
                "combining_marks",
                f"stacks more than {_MAX_COMBINING_RUN} combining marks on one character.",
            )
    return None


def agent_name_problem(name: str) -> NameProblem | None:
    """Why ``name`` (already in normal form) cannot be an agent's name, or None."""
    as_text = label_problem(name, max_length=AGENT_NAME_MAX_LENGTH)
    if as_text is not None:
        return as_text
    key = agent_name_key(name)
    if ACTOR_KIND_SEPARATOR in key:
        return NameProblem(
            "actor_form",
            "contains a colon or a character like one: the ledger writes actors that are not "
            "agents as 'kind:name' (human:alice, api_key:…), and an agent's name must not read "
            "as one of them.",
        )
    if key == agent_name_key(SYSTEM_ACTOR):
        return NameProblem(
            "reserved", f"reads as '{SYSTEM_ACTOR}', the actor the service itself writes as."
        )
    if not any(unicodedata.category(char)[0] in "LN" for char in name):
        return NameProblem("no_letter_or_digit", "needs at least one letter or digit.")
    marks = _mark_problem(name)
    if marks is not None:
        return marks
    scripts = _scripts(name)
    if len(scripts) > 1 and not any(scripts <= allowed for allowed in _SCRIPTS_WRITTEN_TOGETHER):
        return NameProblem(
            "mixed_scripts",
            f"mixes the scripts {', '.join(sorted(s.title() for s in scripts))}; a name is "
            "written in one (Latin may go with Chinese, Japanese or Korean), so that look-alike "
            "letters of another script cannot pass for it.",
        )
    return None


def human_actor_problem(actor: str) -> NameProblem | None:
    """Why a client-written ``human:<name>`` actor is unacceptable, or None.

    No registry of people stands behind these names (orchestrators record their users), so only
    the form is checked: the name part follows the agent-name rule and is in normal form, so
    ``human:bob`` with a Cyrillic ``o`` or a hidden character cannot pass for ``human:bob``.
    """
    name = actor.removeprefix(HUMAN_ACTOR_PREFIX)
    if name != name_normal_form(name):
        return NameProblem(
            "not_normalised",
            "is not in normal form (NFKC, trimmed, single spaces): "
            f"write {name_normal_form(name)!r}.",
        )
    return agent_name_problem(name)


def label_problem(label: str, *, max_length: int) -> NameProblem | None:
    """Why ``label`` (already in normal form) cannot name a tenant or an API key, or None."""
    if not label:
        return NameProblem("empty", "is empty.")
    invisible = _invisible_problem(label)
    if invisible is not None:
        return invisible
    if len(label) > max_length:
        return NameProblem("too_long", f"is {len(label)} characters long; at most {max_length}.")
    return None
