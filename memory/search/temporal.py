"""Time in a search query: does it ask *when*, and which periods does it name?

Two kinds of evidence follow from a question's time words (memory.search.ranking uses both):

* a question that asks when something happened ("When did Melanie run a charity race?", "How
  long ago ...") is best answered by a memory whose own text carries a time ("I ran a charity
  race last Sunday"): the search marks the candidates whose content matches
  ``TIME_EXPRESSION`` (in SQL, ``time_expression_sql``);
* a question that names a period ("in May 2023", "in June", "last week", "3 days ago") is about
  memories that occurred in it: ``Period.holds`` tests a memory's ``occurred_at``. Relative
  periods are resolved against the search's ``now``; a month named without a year matches
  that month of any year.

The parser is deliberately small and English-only: it recognises what users and agents type,
nothing is inferred from context, and a query with no time words yields ``QueryTime()``, which
changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH_NUMBER = {name: number for number, name in enumerate(MONTHS, start=1)}
_MONTH_NUMBER.update({name[:3]: number for name, number in list(_MONTH_NUMBER.items())})
_MONTH_NUMBER["sept"] = 9
_MONTH_RE = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "couple of": 2,
    "few": 3,
}

# Words that make a memory's text carry a time: relative days, named days and months, years,
# spans ("two weeks", "a few months"). One pattern for SQL (``~*``, ARE word boundaries \m \M)
# and Python (\b), so the service and the tests agree.
_TIME_EXPRESSION_BODY = (
    r"(yesterday|today|tonight|tomorrow|ago|recently|lately|since|weekend|"
    r"(last|next|this|past|coming|previous) (week|month|year|night|time|summer|winter|spring|"
    r"fall|autumn|morning|evening)|"
    r"(mon|tues|wednes|thurs|fri|satur|sun)days?|"
    r"january|february|march|april|june|july|august|september|october|november|december|"
    r"(19|20)[0-9][0-9]|"
    r"([0-9]+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|few|couple of|several) "
    r"(years?|months?|weeks?|days?|hours?))"
)
TIME_EXPRESSION = re.compile(rf"\b{_TIME_EXPRESSION_BODY}\b", re.IGNORECASE)
TIME_EXPRESSION_SQL_PATTERN = rf"\m{_TIME_EXPRESSION_BODY}\M"


def time_expression_sql(column: str, parameter: str = "time_pattern") -> str:
    """SQL: whether ``column`` carries a time expression (%(<parameter>)s is
    ``TIME_EXPRESSION_SQL_PATTERN``)."""
    return f"({column} ~* %({parameter})s)"


# A question asking for a time: "when", "what year", "how long ago", "since when", "what date".
_ASKS_WHEN = re.compile(
    r"\b(when|what (year|month|day|date|time|week)|which (year|month|day|date|week)|"
    r"how long|since when|what was the date|how many (years|months|weeks|days))\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Period:
    """[start, end) in UTC; ``month`` alone (start None) matches that month of any year."""

    start: datetime | None = None
    end: datetime | None = None
    month: int | None = None

    def holds(self, moment: datetime) -> bool:
        if self.start is not None and self.end is not None:
            return self.start <= moment < self.end
        return self.month is not None and moment.month == self.month


@dataclass(frozen=True)
class QueryTime:
    asks_when: bool = False
    periods: tuple[Period, ...] = field(default_factory=tuple)

    def in_period(self, moment: datetime) -> bool:
        return any(period.holds(moment) for period in self.periods)


def _month_span(year: int, month: int) -> Period:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return Period(start, end)


def _day_span(year: int, month: int, day: int) -> Period | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return Period(start, start + timedelta(days=1))


def _back(now: datetime, days: float) -> datetime:
    return now - timedelta(days=days)


_DAY_MONTH_YEAR = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({_MONTH_RE})\.?,? (\d{{4}})\b"
)
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH_RE})\.? (\d{{1,2}})(?:st|nd|rd|th)?,? (\d{{4}})\b")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_YEAR = re.compile(rf"\b({_MONTH_RE})\.?,? (\d{{4}})\b")
# A month without a year. "May" is also a verb: only after a preposition, like any short form.
_MONTH_ALONE = re.compile(
    rf"\b(?:in|during|of|since|by|early|late|mid|before|after|until|last|this|next) "
    rf"({_MONTH_RE})\b|\b(january|february|march|april|june|july|august|september|october|"
    r"november|december)\b",
    re.IGNORECASE,
)
_YEAR = re.compile(r"\b(?:in|during|of|since|by|before|after|until|year) ((?:19|20)\d{2})\b")
_RELATIVE_SPAN = re.compile(
    r"\b(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few) "
    r"(day|week|month|year)s? ago\b",
    re.IGNORECASE,
)
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}


def _relative_periods(text: str, now: datetime) -> list[Period]:
    periods: list[Period] = []
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    fixed = {
        "today": (today, today + timedelta(days=1)),
        "tonight": (today, today + timedelta(days=1)),
        "yesterday": (today - timedelta(days=1), today),
        "last night": (today - timedelta(days=1), today + timedelta(days=1)),
        "this week": (today - timedelta(days=today.weekday()), today + timedelta(days=1)),
        "last week": (
            today - timedelta(days=today.weekday() + 7),
            today - timedelta(days=today.weekday()),
        ),
        "past week": (today - timedelta(days=7), today + timedelta(days=1)),
        "last weekend": (
            today - timedelta(days=today.weekday() + 2),
            today - timedelta(days=today.weekday()),
        ),
        "this month": (today.replace(day=1), today + timedelta(days=1)),
        "last month": (
            (today.replace(day=1) - timedelta(days=1)).replace(day=1),
            today.replace(day=1),
        ),
        "past month": (today - timedelta(days=30), today + timedelta(days=1)),
        "this year": (today.replace(month=1, day=1), today + timedelta(days=1)),
        "last year": (
            today.replace(year=today.year - 1, month=1, day=1),
            today.replace(month=1, day=1),
        ),
        "past year": (today - timedelta(days=365), today + timedelta(days=1)),
    }
    for words, (start, end) in fixed.items():
        if re.search(rf"\b{words}\b", text):
            periods.append(Period(start, end))
    for match in _RELATIVE_SPAN.finditer(text):
        count = match.group(1)
        amount = int(count) if count.isdigit() else _NUMBER_WORDS[count]
        centre = _back(today, amount * _UNIT_DAYS[match.group(2)])
        # "3 weeks ago" is about then, give or take half a unit (at least a day).
        slack = max(1, _UNIT_DAYS[match.group(2)] // 2)
        periods.append(Period(centre - timedelta(days=slack), centre + timedelta(days=slack + 1)))
    return periods


def query_time(query: str, now: datetime) -> QueryTime:
    """What a query says about time (see the module's docstring)."""
    lowered = query.lower()
    periods: list[Period] = []
    consumed = lowered
    for pattern, order in (
        (_DAY_MONTH_YEAR, "dmy"),
        (_MONTH_DAY_YEAR, "mdy"),
        (_ISO_DATE, "iso"),
    ):
        for match in pattern.finditer(lowered):
            if order == "dmy":
                day, month, year = match.group(1), _MONTH_NUMBER[match.group(2)], match.group(3)
            elif order == "mdy":
                month, day, year = _MONTH_NUMBER[match.group(1)], match.group(2), match.group(3)
            else:
                year, month, day = match.group(1), int(match.group(2)), match.group(3)
            span = _day_span(int(year), int(month), int(day))
            if span is not None:
                periods.append(span)
                consumed = consumed.replace(match.group(0), " ")
    for match in _MONTH_YEAR.finditer(consumed):
        periods.append(_month_span(int(match.group(2)), _MONTH_NUMBER[match.group(1)]))
        consumed = consumed.replace(match.group(0), " ")
    for match in _MONTH_ALONE.finditer(consumed):
        name = match.group(1) or match.group(2)
        periods.append(Period(month=_MONTH_NUMBER[name.lower()]))
    for match in _YEAR.finditer(consumed):
        year = int(match.group(1))
        periods.append(
            Period(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))
        )
    periods += _relative_periods(lowered, now)
    return QueryTime(asks_when=bool(_ASKS_WHEN.search(query)), periods=tuple(periods))
