"""Regular expressions from clients, run by RE2: time linear in the text, whatever the pattern.

Python's ``re`` backtracks: the content store's ``pattern=(a|a)*b`` over 24 characters took 5 s,
each further character doubling it (issue 18). RE2 (the ``google-re2`` wheel) never backtracks, so
it has no backreferences and no lookaround either. A pattern that uses what RE2 lacks is refused
with 400 ``unsupported_pattern`` naming the construct; one that is no regex at all, with
``invalid_pattern``. Every pattern a client sends goes through ``client_pattern_compile``.

Linear is not yet cheap: a pattern that defeats RE2's DFA (``a[ab]{1000}x``) falls back to
simulating every instruction of its program at every byte, about 10 ns a step, so 2.5 s for
200 KB on a busy machine. That worst case, the program's size times the text's bytes, is bounded
before anything runs (``PATTERN_WORK_BUDGET``, 400 ``pattern_too_costly``).

Our own patterns that run over clients' text use RE2 too (``linear_compile``): Python's ``re``
backtracked for seconds on some of them as well.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

import re2

# Without Django at import time: memory.episodic.policies, which must be, uses linear_compile. The
# functions that answer a client import the API's error class when they run.

# Instructions times bytes, RE2's worst case for one search (see above): about a second.
PATTERN_WORK_BUDGET = 100_000_000

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's bad pattern is a 400, not a line in the server's log
_OPTIONS.never_capture = True  # callers only ask whether a line matches


def client_pattern_compile(pattern: str, *, max_chars: int, text_bytes: int) -> Any:
    """The pattern compiled by RE2, ready to search ``text_bytes`` of UTF-8 within
    ``PATTERN_WORK_BUDGET``, or ``ApiError``."""
    from config.api import ApiError

    if len(pattern) > max_chars:
        raise ApiError(
            code="invalid_pattern",
            message=f"The pattern is over {max_chars} characters.",
            details={"max_chars": max_chars},
        )
    try:
        regex = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        _refuse(pattern, exc)
    work = regex.programsize * text_bytes
    if work > PATTERN_WORK_BUDGET:
        raise ApiError(
            code="pattern_too_costly",
            message=f"This pattern compiles to {regex.programsize} instructions, too many to run "
            f"over {text_bytes:,} bytes: use fewer or smaller counted repeats such as {{n}}, or "
            "'match' for a plain substring.",
            details={
                "program_size": regex.programsize,
                "text_bytes": text_bytes,
                "budget": PATTERN_WORK_BUDGET,
            },
        )
    return regex


def _refuse(pattern: str, failure: Exception) -> NoReturn:
    """``invalid_pattern`` when Python's ``re`` cannot read it either, else
    ``unsupported_pattern`` with RE2's reason."""
    from config.api import ApiError

    raw = failure.args[0] if failure.args else str(failure)
    reason = raw.decode() if isinstance(raw, bytes) else str(raw)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ApiError(
            code="invalid_pattern",
            message=f"The pattern is not a valid regex: {exc}.",
            details={"reason": str(exc)},
        ) from exc
    # RE2's reasons read "<what>: <the part of the pattern>", e.g. "invalid perl operator: (?<=".
    construct = reason.partition(": ")[2] or None
    raise ApiError(
        code="unsupported_pattern",
        message=f"The linear-time regex engine (RE2) cannot run this pattern ({reason}): it has "
        "no backreferences, lookahead or lookbehind, atomic groups or possessive repeats, and "
        "repeats at most 1000 times.",
        details={"construct": construct, "reason": reason, "engine": "re2"},
    ) from failure


def linear_compile(pattern: str) -> Any:
    """One of our own patterns, compiled by RE2, for text a client sent.

    Python's ``re`` backtracked on hostile text over patterns we wrote: the memory policies'
    money pattern took 4 s over "1," repeated 4,000 times, growing with the cube of the length,
    their instruction patterns 4 s over 8,000 newlines, and the HTML compactor's tag patterns
    20 s over 20,000 "<style " (issue 18). RE2's ``\\b``, ``\\w``, ``\\d`` and ``\\s`` are ASCII,
    which heuristics over mostly English text and HTML tolerate; flags go inline (``(?i)``).
    """
    return re2.compile(pattern)
