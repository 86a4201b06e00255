"""What a search query says about time (memory.search.temporal): no database needed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory.search.temporal import TIME_EXPRESSION, Period, query_time

NOW = datetime(2026, 11, 26, 15, 30, tzinfo=UTC)  # a Thursday


def day(year: int, month: int, d: int) -> datetime:
    return datetime(year, month, d, tzinfo=UTC)


@pytest.mark.parametrize(
    "query",
    [
        "When did Melanie run a charity race?",
        "what year did we sign the lease",
        "How long ago was Caroline's 18th birthday?",
        "Since when has the build been red?",
        "How many years has she painted?",
    ],
)
def test_questions_asking_for_a_time_are_recognised(query):
    assert query_time(query, NOW).asks_when


@pytest.mark.parametrize(
    "query",
    ["What did Caroline research?", "Where does the vendor contract live?", "Who won?"],
)
def test_other_questions_do_not_ask_when(query):
    assert not query_time(query, NOW).asks_when


@pytest.mark.parametrize(
    ("query", "inside", "outside"),
    [
        ("What did Caroline do in May 2023?", day(2023, 5, 31), day(2023, 6, 1)),
        ("notes from 8 May 2023", day(2023, 5, 8), day(2023, 5, 9)),
        ("notes from May 8th, 2023", day(2023, 5, 8), day(2023, 5, 7)),
        ("the deploy of 2025-03-01", day(2025, 3, 1), day(2025, 3, 2)),
        ("What happened in 2022?", day(2022, 12, 31), day(2023, 1, 1)),
        ("December 2023 plans", day(2023, 12, 1), day(2024, 1, 1)),
    ],
)
def test_absolute_periods_hold_exactly_their_days(query, inside, outside):
    when = query_time(query, NOW)
    assert when.in_period(inside)
    assert not when.in_period(outside)


@pytest.mark.parametrize(
    ("query", "first", "last"),
    [
        (
            "Where was John between August 11 and August 15 2023?",
            day(2023, 8, 11),
            day(2023, 8, 15),
        ),
        ("between May 1st, 2023 and May 9th, 2023", day(2023, 5, 1), day(2023, 5, 9)),
        ("the sprint from 3 to 9 May 2023", day(2023, 5, 3), day(2023, 5, 9)),
        # The week before a date, and the date itself: a memory of that day may tell of it.
        ("Where was Tim in the week before 16 November 2023?", day(2023, 11, 9), day(2023, 11, 16)),
        ("the puppy she got two weeks before August 11, 2023", day(2023, 7, 28), day(2023, 8, 11)),
        ("on the Sunday before October 25, 2022", day(2022, 10, 18), day(2022, 10, 25)),
        ("a few days after 3 June 2023", day(2023, 6, 3), day(2023, 6, 6)),
        ("the forest picture shared on December 1,2023", day(2023, 12, 1), day(2023, 12, 1)),
        ("What state did Joanna visit in summer 2021?", day(2021, 6, 1), day(2021, 8, 31)),
    ],
)
def test_ranges_offsets_and_seasons_hold_their_days_and_no_more(query, first, last):
    when = query_time(query, NOW)
    assert when.in_period(first)
    assert when.in_period(last)
    assert not when.in_period(first - timedelta(days=1))
    assert not when.in_period(last + timedelta(days=1))


def test_a_time_before_a_date_is_not_also_resolved_against_now():
    when = query_time("What did Maria do last weekend before April 10, 2023?", NOW)
    assert when.periods == (Period(day(2023, 4, 3), day(2023, 4, 11)),)


def test_a_range_backwards_is_its_last_day_alone():
    when = query_time("between May 9 and May 1 2023", NOW)
    assert when.in_period(day(2023, 5, 1))
    assert not when.in_period(day(2023, 5, 5))


def test_winter_is_the_first_months_and_the_december_of_its_year():
    when = query_time("snow in winter 2023", NOW)
    assert when.in_period(day(2023, 2, 28))
    assert when.in_period(day(2023, 12, 31))
    assert not when.in_period(day(2023, 3, 1))
    assert not when.in_period(day(2024, 1, 1))


def test_a_month_without_a_year_matches_that_month_of_any_year():
    when = query_time("When did Melanie go camping in June?", NOW)
    assert when.periods == (Period(month=6),)
    assert when.in_period(day(2019, 6, 30))
    assert not when.in_period(day(2019, 7, 1))


def test_may_the_verb_is_no_month():
    assert query_time("What may the agent deploy?", NOW).periods == ()
    assert query_time("What did we ship in May?", NOW).periods == (Period(month=5),)


@pytest.mark.parametrize(
    ("query", "inside", "outside"),
    [
        ("what did I say yesterday", day(2026, 11, 25), day(2026, 11, 26)),
        ("tasks from last week", day(2026, 11, 16), day(2026, 11, 23)),
        ("what happened last month", day(2026, 10, 31), day(2026, 11, 1)),
        ("the incident 3 days ago", day(2026, 11, 23), day(2026, 11, 19)),
        ("the talk two weeks ago", day(2026, 11, 12), day(2026, 11, 1)),
        ("goals set last year", day(2025, 6, 1), day(2026, 1, 1)),
    ],
)
def test_relative_periods_are_resolved_against_now(query, inside, outside):
    when = query_time(query, NOW)
    assert when.in_period(inside)
    assert not when.in_period(outside)


def test_a_query_without_time_words_changes_nothing():
    when = query_time("vendor contract renewal terms", NOW)
    assert not when.asks_when
    assert when.periods == ()
    assert not when.in_period(NOW)


@pytest.mark.parametrize(
    "text",
    [
        "I went to a support group yesterday",
        "We ran the race last Sunday",
        "I've known them for 4 years",
        "Painted that in 2022",
        "Back in August we moved",
        "a few weeks ago I started",
        "this weekend we camp",
    ],
)
def test_texts_that_carry_a_time_are_marked(text):
    assert TIME_EXPRESSION.search(text)


@pytest.mark.parametrize(
    "text",
    ["I love painting sunsets", "The VPN password rotates", "Maybe we may go", "Mondayish vibes"],
)
def test_texts_without_a_time_are_not(text):
    assert not TIME_EXPRESSION.search(text)
