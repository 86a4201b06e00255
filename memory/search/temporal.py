"""Time in a search query: does it ask *when*, and which periods does it name?

Two kinds of evidence follow from a question's time words (memory.search.ranking uses both):

* a question that asks when something happened ("When did Melanie run a charity race?", "How
  long ago ...") is best answered by a memory whose own text carries a time ("I ran a charity
  race last Sunday"): the search marks the candidates whose content matches
  ``TIME_EXPRESSION`` (kept in SQL as ``Memory.mentions_time``);
* a question that names a period ("in May 2023", "in June", "last week", "3 days ago",
  "between August 11 and August 15 2023", "the week before 16 November 2023", "summer 2021")
  is about memories that occurred in it: ``Period.holds`` tests a memory's ``occurred_at``.
  Relative periods are resolved against the search's ``now``; a month named without a year
  matches that month of any year; a time before or after a date keeps the date's own day,
  on which a memory may tell of it ("we moved in last week").

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
# A count in digits or words: "3", "two", "a couple of" (``_amount`` reads it).
_AMOUNT = r"(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few)"


def _amount(words: str) -> int:
    return int(words) if words.isdigit() else _NUMBER_WORDS[words]


# Words that make a memory's text carry a time: relative days, named days and months, years,
# spans ("two weeks", "a few months"). One pattern for SQL (``~*``, ARE word boundaries \m \M)
# and Python (\b), so the service and the tests agree. The SQL one is the SQL function
# memory_mentions_time's (migration memory.0025), which keeps ``Memory.mentions_time``: changing
# it needs a migration.
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


def _months(year: int, first: int, count: int) -> Period:
    """``count`` whole months from month ``first`` of ``year`` (past its December if need be)."""
    start = datetime(year, first, 1, tzinfo=UTC)
    after = first - 1 + count
    end = datetime(year + after // 12, after % 12 + 1, 1, tzinfo=UTC)
    return Period(start, end)


def _day_start(year: int, month: int, day: int) -> datetime | None:
    try:
        return datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None


def _back(now: datetime, days: float) -> datetime:
    return now - timedelta(days=days)


# Between a date's day or month and its year: "8 May 2023", "May 8, 2023", "December 1,2023".
_YEAR_GAP = r"(?:,\s*|\s+)"
_DAY_MONTH_YEAR = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({_MONTH_RE})\.?{_YEAR_GAP}(\d{{4}})\b"
)
_MONTH_DAY_YEAR = re.compile(
    rf"\b({_MONTH_RE})\.? (\d{{1,2}})(?:st|nd|rd|th)?{_YEAR_GAP}(\d{{4}})\b"
)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# The first day of a range whose last day carries the year: "between August 11 and August 15
# 2023", "from 3 to 9 May 2023", "between May 1, 2023 and May 9, 2023". Matched against the text
# just before the last day's date.
_RANGE_START = re.compile(
    rf"\b(?:between|from) (?:({_MONTH_RE}) (\d{{1,2}})(?:st|nd|rd|th)?|(\d{{1,2}})(?:st|nd|rd|th)?"
    rf"(?: (?:of )?({_MONTH_RE}))?)(?:{_YEAR_GAP}(\d{{4}}))? "
    r"(?:and|to|until|through|-) $"
)
# An offset from a date, matched against the text just before it: "the week before", "two weeks
# before", "the Sunday before", "a few days after".
_OFFSET = re.compile(
    rf"\b(?:{_AMOUNT} )?"
    r"(day|week|weekend|month|(?:mon|tues|wednes|thurs|fri|satur|sun)day)s? "
    r"(before|after|prior to|following) (?:on |of )?$"
)
# Characters before a date searched for a range's first day or an offset ("between September
# 30th, 2023 and ", "a couple of weeks before "): more than either takes.
_LOOK_BACK = 48
# Seasons of a year, northern hemisphere: "summer 2021", "the spring of 2023".
_SEASON = re.compile(r"\b(spring|summer|fall|autumn|winter) (?:of )?((?:19|20)\d{2})\b")
# Each season's (first month, months); the winter a year names is its first months and its
# December.
_SEASONS = {
    "spring": [(3, 3)],
    "summer": [(6, 3)],
    "fall": [(9, 3)],
    "autumn": [(9, 3)],
    "winter": [(1, 2), (12, 1)],
}
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
    rf"\b{_AMOUNT} (day|week|month|year)s? ago\b",
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
        amount = _amount(count)
        centre = _back(today, amount * _UNIT_DAYS[match.group(2)])
        # "3 weeks ago" is about then, give or take half a unit (at least a day).
        slack = max(1, _UNIT_DAYS[match.group(2)] // 2)
        periods.append(Period(centre - timedelta(days=slack), centre + timedelta(days=slack + 1)))
    return periods


def _dated_days(text: str) -> list[tuple[re.Match[str], datetime]]:
    """Every full date in ``text`` ("8 May 2023", "May 8, 2023", "2023-05-08") and the start of
    its day."""
    days: list[tuple[re.Match[str], datetime]] = []
    for pattern, order in (
        (_DAY_MONTH_YEAR, "dmy"),
        (_MONTH_DAY_YEAR, "mdy"),
        (_ISO_DATE, "iso"),
    ):
        for match in pattern.finditer(text):
            if order == "dmy":
                day, month, year = match.group(1), _MONTH_NUMBER[match.group(2)], match.group(3)
            elif order == "mdy":
                month, day, year = _MONTH_NUMBER[match.group(1)], match.group(2), match.group(3)
            else:
                year, month, day = match.group(1), int(match.group(2)), match.group(3)
            start = _day_start(int(year), int(month), int(day))
            if start is not None:
                days.append((match, start))
    return days


def _around(text: str, match: re.Match[str], day: datetime) -> tuple[Period, int]:
    """A dated day as the period the words before it make of it, and where those words start
    (the date's own start when there are none): a range's last day ("between August 11 and
    August 15 2023"), a day some time after or before another ("the week before 16 November
    2023": that week and the day itself, on which a memory may tell of it), or the day alone."""
    end = day + timedelta(days=1)
    # The words that make a range or an offset are a few before the date; a longer look back
    # would cost every date of a long query the whole text before it.
    look_from = max(0, match.start() - _LOOK_BACK)
    before = text[look_from : match.start()]
    if (start := _RANGE_START.search(before)) is not None:
        first = _range_first_day(start, day)
        if first is not None and first < end:
            return Period(first, end), look_from + start.start()
    if (offset := _OFFSET.search(before)) is not None:
        count = offset.group(1)
        amount = 1 if count is None else _amount(count)
        # A weekend or a named weekday before a date: the week before it.
        span = timedelta(days=amount * _UNIT_DAYS.get(offset.group(2), 7))
        if offset.group(3) in ("before", "prior to"):
            return Period(day - span, end), look_from + offset.start()
        return Period(day, end + span), look_from + offset.start()
    return Period(day, end), match.start()


def _range_first_day(start: re.Match[str], last: datetime) -> datetime | None:
    """The start of a range's first day from ``_RANGE_START``'s groups, its month and year
    taken from the last day when the words leave them out ("from 3 to 9 May 2023")."""
    month_name = start.group(1) or start.group(4)
    day = start.group(2) or start.group(3)
    month = _MONTH_NUMBER[month_name] if month_name else last.month
    year = int(start.group(5)) if start.group(5) else last.year
    return _day_start(year, month, int(day))


def _seasons(text: str) -> list[tuple[re.Match[str], list[Period]]]:
    """Each season a year names ("summer 2021") and its months."""
    out: list[tuple[re.Match[str], list[Period]]] = []
    for match in _SEASON.finditer(text):
        season, year = match.group(1), int(match.group(2))
        out.append((match, [_months(year, first, count) for first, count in _SEASONS[season]]))
    return out


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with the characters of these spans as spaces: words already read as a time are
    not read again (a dated day's month as a month of any year, say). Linear in the text, so
    a long query with many dates costs no more than its length."""
    if not spans:
        return text
    chars = list(text)
    for start, end in spans:
        chars[start:end] = " " * (end - start)
    return "".join(chars)


def query_time(query: str, now: datetime) -> QueryTime:
    """What a query says about time (see the module's docstring)."""
    lowered = query.lower()
    periods: list[Period] = []
    read: list[tuple[int, int]] = []
    for match, day in _dated_days(lowered):
        period, words_start = _around(lowered, match, day)
        periods.append(period)
        read.append((words_start, match.end()))
    consumed = _blank(lowered, read)
    read = []
    for match, spans in _seasons(consumed):
        periods += spans
        read.append(match.span())
    for match in _MONTH_YEAR.finditer(consumed):
        periods.append(_months(int(match.group(2)), _MONTH_NUMBER[match.group(1)], 1))
        read.append(match.span())
    consumed = _blank(consumed, read)
    for match in _MONTH_ALONE.finditer(consumed):
        name = match.group(1) or match.group(2)
        periods.append(Period(month=_MONTH_NUMBER[name.lower()]))
    for match in _YEAR.finditer(consumed):
        year = int(match.group(1))
        periods.append(_months(year, 1, 12))
    periods += _relative_periods(consumed, now)
    return QueryTime(asks_when=bool(_ASKS_WHEN.search(query)), periods=tuple(periods))
