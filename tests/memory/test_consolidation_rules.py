"""The rule that finds a memory superseding an older one (memory.consolidation.rules)."""

from __future__ import annotations

import json

import pytest

from config.http import ExternalServiceError
from memory.consolidation.model import decision_parse
from memory.consolidation.rules import RuleSettings, holder, rule_verdict

RULE = RuleSettings(threshold=0.6)


@pytest.mark.parametrize(
    ("new", "old"),
    [
        ("Now I prefer GBP for invoices.", "I prefer invoices in EUR."),
        ("I'm now a product manager.", "I work as a graphic designer."),
        ("I moved to Leeds in the spring.", "I live in Manchester."),
        ("The team offsite moved to Porto.", "The team offsite is planned for Lisbon."),
        ("We moved CI from Jenkins to GitHub Actions.", "Our CI runs on Jenkins."),
    ],
)
def test_a_new_value_for_the_same_subject_supersedes(new, old):
    assert rule_verdict(new=new, old=old, similarity=0.8, rule=RULE).supersedes


@pytest.mark.parametrize(
    ("new", "old"),
    [
        # Different things liked: the verb of liking is no subject.
        ("I prefer meetings in the morning.", "I prefer invoices in EUR."),
        # Different people.
        ("I live in Manchester.", "My parents live in Manchester."),
        ("My phone number is +44 7700 900123.", "The office phone number is +44 20 7946 0000."),
        # A name alone says who, not which fact.
        ("This week's on-call engineer is Dana.", "Dana owns the billing dashboards."),
        # The same words: a restatement changes nothing.
        ("I prefer invoices in EUR", "I prefer invoices in EUR."),
    ],
)
def test_other_subjects_and_restatements_do_not(new, old):
    assert not rule_verdict(new=new, old=old, similarity=0.9, rule=RULE).supersedes


def test_under_the_threshold_nothing_is_superseded():
    verdict = rule_verdict(
        new="Now I prefer GBP for invoices.",
        old="I prefer invoices in EUR.",
        similarity=0.59,
        rule=RULE,
    )

    assert not verdict.supersedes


def test_the_holder_of_a_fact():
    assert holder("I'm vegan now.") == "self"
    assert holder("Our CI runs on Jenkins.") == "we"
    assert holder("My sister works as a nurse.") == "rel:sister"
    assert holder("The launch is on March 3.") == "other"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My son's shoe size is 38.", "rel:son"),
        ("My son\u2019s shoe size is 35.", "rel:son"),
        ("My wife's car is a Golf.", "rel:wife"),
        ("Our team's standup is at 9.", "rel:team"),
        ("My manager's name is Dana.", "rel:manager"),
        ("My older brother's flat is in Leeds.", "rel:brother"),
        ("My parents' house is in York.", "rel:parent"),
        # "'s" for "is" leaves the fact the speaker's.
        ("My name's Dana.", "self"),
        ("My role's a product manager now.", "self"),
        ("My email's dana@example.com", "self"),
    ],
)
def test_a_possessive_noun_phrase_names_its_own_holder(text, expected):
    assert holder(text) == expected


@pytest.mark.parametrize(
    ("new", "old"),
    [
        ("My shoe size is 42.", "My son's shoe size is 38."),
        ("My son's shoe size is 38.", "My shoe size is 42."),
        ("My shoe size is 42.", "My wife's shoe size is 39."),
        ("Our standup is at 10 now.", "Our team's standup is at 9."),
        ("My office is in Leeds now.", "My manager's office is in York."),
    ],
)
def test_a_fact_of_someone_named_by_a_possessive_is_not_the_speakers(new, old):
    verdict = rule_verdict(new=new, old=old, similarity=0.9, rule=RULE)

    assert not verdict.supersedes
    assert verdict.reason.startswith("about ")


def test_a_possessors_own_fact_still_supersedes_its_older_value():
    assert rule_verdict(
        new="My son's shoe size is 38 now.",
        old="My son's shoe size is 35.",
        similarity=0.9,
        rule=RULE,
    ).supersedes


def test_the_models_answer_in_mem0s_shape_is_read():
    entries = [
        {"id": "1", "text": "x", "event": "UPDATE", "old_memory": "y"},
        {"id": "0", "event": "NONE"},
        {"id": "7", "event": "DELETE"},
        {"id": "new", "event": "ADD"},
    ]
    answer = "```json\n" + json.dumps({"memory": entries}) + "\n```"

    decided = decision_parse(answer, neighbours=2)

    assert decided.superseded == {1: "UPDATE"}  # "7" names no neighbour: ignored
    assert decided.adds


@pytest.mark.parametrize(
    "answer",
    [
        "nope",
        '{"memories": []}',
        '{"memory": [{"id": "0", "event": "MERGE"}]}',
        '{"memory": ["x"]}',
    ],
)
def test_an_answer_out_of_shape_is_refused(answer):
    with pytest.raises(ExternalServiceError):
        decision_parse(answer, neighbours=1)
