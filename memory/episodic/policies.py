"""Store-time policies for episodic memories (SPEC §4): type inference, importance, TTL, hashing.

Everything here is a pure function of its arguments, so the store service, the API, backfills
and a ledger rebuild all reach the same type, importance, expiry and hash for the same input.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from config.patterns import linear_compile

# The model's MemoryType choices use these same values; they live here as plain strings so the
# policies stay importable (and testable) without Django.
CONVERSATION = "conversation"
TASK_COMPLETION = "task_completion"
DECISION = "decision"
APPROVAL = "approval"
EXPLICIT = "explicit"
ERROR = "error"
FACT = "fact"

MEMORY_TYPES: tuple[str, ...] = (
    CONVERSATION,
    TASK_COMPLETION,
    DECISION,
    APPROVAL,
    EXPLICIT,
    ERROR,
    FACT,
)

DEFAULT_TTL: dict[str, timedelta | None] = {
    CONVERSATION: timedelta(days=7),
    TASK_COMPLETION: timedelta(days=30),
    DECISION: timedelta(days=90),
    APPROVAL: timedelta(days=90),
    # The user asked for permanence; only decay, quota or deletion may remove it.
    EXPLICIT: None,
    ERROR: timedelta(days=14),
    # Not in the SPEC table. A stated fact or preference ("I prefer invoices in EUR") outlives the
    # task it came up in, but it was not explicitly pinned and goes stale (people move, change
    # tools), so it gets the longest non-permanent TTL the SPEC uses: no inferred type outlives
    # what a person explicitly asked to keep.
    FACT: timedelta(days=90),
}

# Whose words can pin a memory or set a standing preference: the person and the operator. Tool
# output is third-party text (a web page, an email body) and assistant text can echo it, so neither
# may pin itself forever at importance 1.0 ("don't forget to subscribe!").
_INSTRUCTING_ROLES = frozenset({"user", "system"})

_FLAGS = re.IGNORECASE

# An imperative position: the start of a sentence or clause, or after a politeness/request lead-in.
# This is what separates "remember that the VPN rotates monthly" from "I remember that meeting".
# The lead-in may end in punctuation: the match then starts at it (RE2 has no lookbehind, and
# whether a match exists is all that is asked).
_LEAD = (
    r"(?:^|[.!?;:\n]\s*|\b(?:please|pls|can\s+you|could\s+you|would\s+you|will\s+you|"
    r"you\s+should|make\s+sure\s+(?:to|you)|be\s+sure\s+to|and)\s+)"
)

# RE2 (config.patterns.linear_compile), as for _MONEY and _STANDING_INSTRUCTION: over a run of
# newlines Python's re took seconds (4 s for 8,000), each start re-reading the run.
_EXPLICIT = linear_compile(
    "(?im)" + _LEAD + r"(?:remember\s+(?:this|that|these|the\s+following)\b|remember\s*:|"
    r"(?:don't|do\s+not|never)\s+forget\b|keep\s+in\s+mind\b|make\s+a\s+note\b)"
    r"|\bnote\s+(?:this\s+)?for\s+later\b|\bfor\s+future\s+reference\b|\bplease\s+remember\b"
)

_APPROVAL = re.compile(
    r"\b(?:approved?|approving|approval\s+granted|signed\s+off|sign-off\s+(?:given|granted)|"
    r"green-?lit|greenlighted)\b",
    _FLAGS,
)

_DECISION = re.compile(
    r"\b(?:we(?:'ve)?\s+decided|(?:i|we)\s+(?:have\s+)?decided|decided\s+(?:to|on|against)|"
    r"final\s+decision|let's\s+go\s+with|(?:we'll|we\s+will|i'll)\s+go\s+with|"
    r"(?:we're|we\s+are|i'm|i\s+am)\s+going\s+with|(?:was|were|is|been|has\s+been)\s+chosen|"
    r"(?:we|i)\s+chose|opted\s+(?:for|to)|"
    r"settled\s+on|(?:we|i)\s+(?:rejected|turned\s+down))\b"
    r"|\bdecision\s*:",
    _FLAGS,
)

_COMPLETION = re.compile(
    r"\b(?:done|completed?|finished|deployed|merged|shipped|released|resolved|fixed|"
    r"delivered|published)\b",
    _FLAGS,
)

# A fix or resolution mentions the error it fixed; the event is the completion, not the error.
_RESOLUTION = re.compile(r"\b(?:resolved|fixed|fixes|resolves)\b", _FLAGS)

_ERROR = re.compile(
    r"\b(?:errors?|failed|fails|failing|failure|exceptions?|traceback|timed\s+out|"
    r"crash(?:ed|es)?|stack\s+trace|panic(?:ked)?|segfault|5\d\d\s+(?:error|response))\b",
    _FLAGS,
)

# "Completed with no errors" reports success; drop negated mentions before looking for failure.
_NEGATED_ERROR = re.compile(
    r"\b(?:no|without|zero|0)\s+(?:new\s+)?(?:errors?|failures?|exceptions?)\b", _FLAGS
)

# Stated facts and preferences about the person or organisation.
_FACT = re.compile(
    r"\b(?:i\s+prefer|i'd\s+rather|we\s+prefer|my\s+(?:name|email|e-mail|phone|number|address|"
    r"timezone|time\s+zone|birthday|role|title|manager|favou?rite\s+\w+)\s+is|call\s+me|"
    r"i(?:'m|\s+am)\s+allergic|i\s+live\s+in|i\s+work\s+(?:at|for)|our\s+fiscal\s+year)\b",
    _FLAGS,
)

# A sentence-initial "Always …"/"Never …" from a person is a standing instruction. It is kept as a
# fact, not an explicit pin: the user set a preference rather than asked for a permanent memory.
# Mid-sentence "always" ("it always crashes") says nothing about preference, hence the anchoring.
_STANDING_INSTRUCTION = linear_compile(
    r"(?im)(?:^|[.!?\n]\s*)(?:please\s+)?(?:always|never)\s+(\w+)"
)


def _standing_instruction(text: str) -> bool:
    # "Never mind" instructs nothing; RE2 has no lookahead to say so in the pattern.
    return any(found.group(1).lower() != "mind" for found in _STANDING_INSTRUCTION.finditer(text))


# Sentence ends: terminal punctuation followed by a space (so "$12.50" and "v2.3" stay whole).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def _normalise_quotes(text: str) -> str:
    # Phones and chat clients send curly apostrophes; the patterns are written with straight ones.
    return text.replace("\u2019", "'").replace("\u2018", "'")


def _statements(text: str) -> str:
    """The text without its questions: "Should we go with Stripe?" decides nothing."""
    sentences = (s.strip() for s in _SENTENCE_END.split(text))
    return "\n".join(s for s in sentences if s and not s.endswith("?"))


def _metadata_reports_error(metadata: Mapping[str, Any]) -> bool:
    if metadata.get("error") or metadata.get("is_error") is True or metadata.get("ok") is False:
        return True
    status = metadata.get("status")
    if isinstance(status, str) and status.lower() in {"error", "failed", "failure", "timeout"}:
        return True
    exit_code = metadata.get("exit_code")
    return isinstance(exit_code, int) and not isinstance(exit_code, bool) and exit_code != 0


def memory_type_infer(*, content: str, role: str, metadata: Mapping[str, Any]) -> str:
    """Guess a memory type when the client gave none. Deterministic; first match wins.

    Order (and why):
    1. explicit — "remember this/that", "don't forget", "keep in mind", "note for later", in an
       imperative position, from the user or the system prompt (tool output cannot pin itself).
    2. error — a ``tool_result`` whose metadata reports failure (``error``, ``is_error``,
       ``ok: false``, ``status: error|failed``, non-zero ``exit_code``).
    3. approval — "approved", "signed off", "green-lit": checked before decision because an
       approval is the stronger, audited kind of decision.
    4. decision — "we decided", "decision:", "let's go with", "chosen", "opted for", "we rejected".
    5. error — "error", "failed", "exception", "traceback", "timed out", … unless negated ("no
       errors") or the text reports a fix ("fixed the timeout"), which is a completion.
    6. task completion — "done", "completed", "finished", "deployed", "merged", "shipped", …
    7. fact — stated preferences and personal facts ("I prefer …", "my timezone is …"), and a
       person's sentence-initial "Always …"/"Never …".
    8. conversation — everything else.

    Steps 3-7 look only at statements: a question ("Is the deploy done?") reports nothing. The one
    exception is step 5 for tool results, which are searched whole.
    """
    text = _normalise_quotes(content)
    if role in _INSTRUCTING_ROLES and _EXPLICIT.search(text):
        return EXPLICIT
    if role == "tool_result" and _metadata_reports_error(metadata):
        return ERROR

    statements = _statements(text)
    if _APPROVAL.search(statements):
        return APPROVAL
    if _DECISION.search(statements):
        return DECISION
    # Tool output is rarely phrased as a question, and a failing tool's message often is not a
    # sentence at all, so tool results are searched whole.
    error_scope = text if role == "tool_result" else statements
    if _ERROR.search(_NEGATED_ERROR.sub(" ", error_scope)) and not _RESOLUTION.search(statements):
        return ERROR
    if _COMPLETION.search(statements):
        return TASK_COMPLETION
    if _FACT.search(statements) or (
        role in _INSTRUCTING_ROLES and _standing_instruction(statements)
    ):
        return FACT
    return CONVERSATION


# RE2: over "1,1,1,..." Python's re took 4 s for 8,000 characters, growing with the cube.
_MONEY = linear_compile(
    r"(?i)[$€£¥₹]\s?\d[\d,]*(?:\.\d+)?\s?(?:[kmb]n?\b)?"
    r"|\b(?:USD|EUR|GBP|JPY|CHF|CAD|AUD|INR|CNY)\s?\d[\d,]*(?:\.\d+)?"
    r"|\b\d[\d,]*(?:\.\d+)?\s?(?:[kmb]n?\s?)?(?:USD|EUR|GBP|JPY|CHF|CAD|AUD|INR|CNY|dollars?|"
    r"euros?|pounds?|bucks)\b"
)

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
    r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)

# A month name alone is not enough ("may" is a verb), so months need a day or a year next to them.
_DATE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b"
    rf"|\b{_MONTH}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\b"
    rf"|\b{_MONTH}\s+\d{{4}}\b"
    r"|\b(?:by|on|before|until|next|this)\s+(?:mon|tues|wednes|thurs|fri|satur|sun)day\b"
    r"|\b(?:tomorrow|tonight|next\s+(?:week|month|quarter|year)|end\s+of\s+(?:day|week|month|"
    r"quarter|year)|EOD|EOW|EOM|deadline|due(?!\s+to\b)|Q[1-4](?:\s+\d{4})?|FY\s?\d{2,4})\b",
    _FLAGS,
)

# Things the agent or user actually did in the world, beyond the type keywords above.
_ACTION = re.compile(
    r"\b(?:booked|scheduled|sent|paid|ordered|cancell?ed|signed|purchased|bought|transferred|"
    r"refunded|invoiced|assigned|escalated|hired|renewed|terminated|migrated|rolled\s+back)\b",
    _FLAGS,
)

# Acknowledgements, greetings and chat filler. A message made only of these carries nothing worth
# recalling later.
_SMALL_TALK_WORDS = frozenset(
    {
        "ok", "okay", "k", "kk", "okey", "thanks", "thank", "you", "thx", "ty", "tysm", "cheers",
        "cool", "great", "nice", "awesome", "perfect", "sounds", "good", "lol", "lmao", "haha",
        "hah", "hi", "hello", "hey", "yo", "bye", "goodbye", "cya", "yes", "yeah", "yep", "yup",
        "sure", "np", "no", "problem", "worries", "got", "it", "gotcha", "alright", "right",
        "fine", "much", "so", "very", "a", "lot", "morning", "evening", "night", "there", "all",
        "ack", "noted", "welcome", "you're", "youre", "sweet", "wow", "ah", "oh", "hmm", "mhm",
    }
)  # fmt: skip

# Pleasantries beyond acknowledgements: greetings, how-are-yous, weather, weekends and the words
# that hold them together. A short message made only of these and _SMALL_TALK_WORDS is small talk
# ("hi, how are you?", "Good morning! Lovely weather today"), however many words it has; one word
# outside them ("server", "invoice") makes it something else.
_PHATIC_WORDS = frozenset(
    {
        "how", "how's", "hows", "are", "is", "was", "were", "be", "been", "am", "i", "i'm", "im",
        "it's", "its", "what", "what's", "whats", "up", "doing", "going", "things", "everyone",
        "everybody", "guys", "folks", "mate", "well", "lovely", "beautiful", "wonderful",
        "happy", "merry", "christmas", "birthday", "holiday", "holidays", "weekend", "trip",
        "lunch", "coffee", "day", "today", "week", "mondays", "monday", "friday", "hope",
        "hoping", "enjoy", "have", "had", "take", "care", "asking", "congrats",
        "congratulations", "meet", "hear", "see", "talk", "chat", "soon", "later", "around",
        "again", "back", "afternoon", "laugh", "funny", "fun", "classic", "fair", "enough",
        "same", "here", "pretty", "tired", "busy", "long", "time", "not", "just", "chilling",
        "weather", "sunny", "sun", "rain", "raining", "rainy", "hot", "cold", "freezing", "warm",
        "outside", "snow", "snowing", "cloudy", "comes", "out", "ugh", "brb", "grabbing",
        "family", "your", "you", "me", "my", "we", "our", "the", "an", "to", "of", "and", "for",
        "on", "in", "at", "with", "this", "that", "these", "one", "about", "too", "really",
        "made", "as", "end", "thing", "glad", "miss", "missed",
    }
)  # fmt: skip
# More words than a greeting or a remark about the weather takes.
_PHATIC_MAX_WORDS = 12

# An instruction: a clause opening with an action verb in the imperative, possibly after a
# politeness or sequencing word ("Deploy version 2.3.1 to production now.", "Please send the
# contract", "then restart the pods"). RE2, as _EXPLICIT: its clause starts repeat over newlines.
_INSTRUCTION_VERBS = (
    r"deploy|ship|release|roll\s+back|rollback|revert|restart|reboot|stop|start|kill|"
    r"shut\s+down|disable|enable|lock|unlock|block|unblock|freeze|scale|migrate|upgrade|"
    r"downgrade|install|patch|push|merge|publish|back\s+up|archive|delete|remove|purge|drop|"
    r"revoke|rotate|reset|grant|invite|assign|escalate|notify|tell|inform|email|call|text|"
    r"send|forward|submit|file|sign|approve|reject|pay|refund|transfer|invoice|charge|order|"
    r"buy|purchase|book|schedule|cancel|renew|terminate|hire|fire|promote|add|create|update|"
    r"set|switch|move|change|configure|close|open|run|fix|raise|lower|increase|decrease"
)
_INSTRUCTION = linear_compile(
    r"(?im)(?:^|[.!?;:\n]\s*)(?:(?:please|pls|now|then|and|ok|okay|urgent(?:ly)?)[,:]?\s+)*"
    r"(?:" + _INSTRUCTION_VERBS + r")\s+(?:the|a|an|all|every|this|that|these|those|our|my|"
    r"their|his|her|its|it|them|him|me|us|to|\w+)\b"
)

# What raises the stakes of anything said: production, outages, breaches, leaked secrets, data
# loss, and a demand for speed.
_STAKES = re.compile(
    r"\b(?:production|prod|outage|breach(?:ed)?|leak(?:ed|s)?|compromised|data\s+loss|lost|"
    r"immediately|asap|urgent(?:ly)?|right\s+away|critical|security)\b",
    _FLAGS,
)

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")

_BASE_IMPORTANCE: dict[str, float] = {
    CONVERSATION: 0.5,
    FACT: 0.6,
    ERROR: 0.55,
    TASK_COMPLETION: 0.6,
    DECISION: 0.7,
    APPROVAL: 0.75,
}

# Only an explicit "remember this" may score 1.0 (SPEC §4); a heuristic stays below it so that
# "the user asked" remains distinguishable from "the text looked important".
_HEURISTIC_CEILING = 0.95


def importance_estimate(
    *, content: str, role: str, memory_type: str, metadata: Mapping[str, Any]
) -> float:
    """Importance in [0, 1] at store time, when the client gave none. Deterministic.

    ``metadata`` is accepted for symmetry with :func:`memory_type_infer` (callers pass the same
    arguments to both); the score depends on the type, the text and, for instructions, the role.

    Scoring table:

    ==================  =====  ===========================================================
    memory type         base   notes
    ==================  =====  ===========================================================
    explicit            1.00   final: no adjustment applies
    approval            0.75
    decision            0.70
    task_completion     0.60
    fact                0.60
    error               0.55
    conversation        0.50   the "medium" default
    ==================  =====  ===========================================================

    Signals, added to the base for every type but explicit:

    - money amount ("$1,200", "€30", "1.2k USD", "EUR 500")            +0.15
    - date or deadline ("2025-03-01", "May 3", "by Friday", "Q3", "EOD") +0.10
    - action taken ("booked", "paid", "sent", "scheduled", "signed")     +0.10
    - an instruction: a clause opening with an imperative action verb
      ("Deploy version 2.3.1 now.", "please send the contract"); never
      for a ``tool_result``, whose text does not instruct the agent      +0.20
    - stakes ("production", "outage", "breach", "leaked", "immediately") +0.10

    The sum is capped at 0.95, leaving 1.0 to explicit memories alone.

    Small talk, for conversation memories with none of the signals above:

    - empty, or only emoji and punctuation                               0.05
    - only acknowledgements and greetings ("ok thanks!", "sounds good")  0.10
    - any other text of three words or fewer                             0.15
    - up to 12 words of greetings, pleasantries and weather ("hi, how
      are you?", "Good morning! Lovely weather today")                   0.15

    A non-conversation memory of two words or fewer ("Done.", "Build failed") loses 0.20: the type
    is plausible but there is too little text to recall anything by.

    The result is rounded to 3 decimals.
    """
    if memory_type == EXPLICIT:
        return 1.0
    try:
        score = _BASE_IMPORTANCE[memory_type]
    except KeyError:
        raise ValueError(f"unknown memory type {memory_type!r}") from None

    text = _normalise_quotes(content)
    words = [w.lower() for w in _WORD.findall(text)]
    has_signal = False
    if _MONEY.search(text):
        score += 0.15
        has_signal = True
    if _DATE.search(text):
        score += 0.10
        has_signal = True
    if _ACTION.search(text):
        score += 0.10
        has_signal = True
    # Third-party text (tool output) does not instruct the agent: it may only describe.
    if role != "tool_result" and _INSTRUCTION.search(_statements(text)):
        score += 0.20
        has_signal = True
    if _STAKES.search(text):
        score += 0.10
        has_signal = True

    if memory_type == CONVERSATION and not has_signal:
        if not words:
            return 0.05
        if all(w in _SMALL_TALK_WORDS for w in words):
            return 0.1
        if len(words) <= 3:
            return 0.15
        if len(words) <= _PHATIC_MAX_WORDS and all(
            w in _SMALL_TALK_WORDS or w in _PHATIC_WORDS for w in words
        ):
            return 0.15
    elif len(words) <= 2 and not has_signal:
        score -= 0.20

    return round(min(max(score, 0.0), _HEURISTIC_CEILING), 3)


# The bands a score falls in, as design note 001 speaks of importance: below 0.3 is small talk
# worth little (its cleanup threshold is 0.2), from 0.6 up what an agent should recall (a task
# done, a fact, a decision, an instruction). bench/importance_agreement.py scores the heuristic
# against hand labels in these bands.
LOW_BELOW = 0.3
HIGH_FROM = 0.6


def importance_band(score: float) -> str:
    """``low``, ``neutral`` or ``high``: the band an importance score falls in."""
    if score < LOW_BELOW:
        return "low"
    return "high" if score >= HIGH_FROM else "neutral"


def expires_at_default(*, memory_type: str, created_at: datetime) -> datetime | None:
    """When a memory of this type expires by default, or None for never (explicit memories)."""
    try:
        ttl = DEFAULT_TTL[memory_type]
    except KeyError:
        raise ValueError(f"unknown memory type {memory_type!r}") from None
    return None if ttl is None else created_at + ttl


_WHITESPACE = re.compile(r"\s+")


def content_hash(content: str) -> str:
    """SHA-256 hex digest of the content, normalised so de-duplication ignores trivial differences.

    The text is NFC-normalised (a precomposed "é" and "e" + combining accent hash the same), then
    every run of whitespace — spaces, tabs, newlines, non-breaking spaces — becomes one space and
    the ends are stripped. Case and punctuation are kept: "Pay $5" and "pay $5." stay distinct.
    """
    normalised = _WHITESPACE.sub(" ", unicodedata.normalize("NFC", content)).strip()
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()
