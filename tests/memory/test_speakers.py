"""Who speaks a memory the client stored without a speaker (memory.episodic.speakers) and what
the embedder is given for it (memory.episodic.services.memory_embedding_texts)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection

from ledger.projections import projection_rebuild, registered_projections
from memory.episodic.services import MemoryDraft, memories_store, memory_embedding_texts
from memory.episodic.speakers import addressed_names, sessions_speakers
from memory.models import Memory

CONVERSATION = [
    "Hey Mel! Good to see you! How have you been?",
    "Hey Caroline! I'm swamped with the kids & work. What's up with you?",
    "I went to a support group yesterday and it was so powerful.",
    "Wow, that's cool, Caroline! What happened that was so awesome?",
    "The stories were so inspiring! I was so happy for all the support.",
    "That's really cool. You've got guts, Melanie is impressed. What now?",
    "Thanks, Melanie! Gonna continue my studies and check out career options.",
]


def unknown(contents):
    return [(None, content) for content in contents]


def test_the_names_a_turn_addresses_are_found_where_vocatives_stand():
    assert addressed_names("Hey Mel! Good to see you!") == ["Mel"]
    assert addressed_names("That charity race sounds great, Jon! Well done.") == ["Jon"]
    assert addressed_names("Gina, you did it!") == ["Gina"]
    assert addressed_names("Yep, that was the plan.") == []
    assert addressed_names("I met her in Paris last May.") == []


def test_two_people_taking_turns_are_named_from_how_they_address_each_other():
    [speakers] = sessions_speakers([unknown(CONVERSATION)])

    # Short forms become the full name someone else uses ("Mel" -> "Melanie").
    assert speakers == ["Caroline", "Melanie"] * 3 + ["Caroline"]


def test_a_speaker_the_client_gave_is_kept_and_places_the_other_side():
    turns = unknown(CONVERSATION)
    turns[2] = ("Caroline", turns[2][1])
    turns[3] = ("Mel", turns[3][1])

    [speakers] = sessions_speakers([turns])

    assert speakers[2:4] == ["Caroline", "Mel"]
    assert speakers[0] == "Caroline"


@pytest.mark.parametrize(
    "contents",
    [
        # Notes, no one addressed.
        ["Bought milk.", "The meeting moved to Friday.", "Call the bank about the card."],
        # The same name addressed from both sides: not two people taking turns.
        ["Thanks, Sam!", "Sure, Sam.", "Hey Sam, see you.", "Bye, Sam!"],
        # Words that stand where a name would but are written in lower case elsewhere.
        ["Those, I think, are great.", "Exciting, right? those are new", "exciting indeed"],
    ],
)
def test_no_one_is_named_without_two_people_addressing_each_other(contents):
    assert sessions_speakers([unknown(contents)]) == [[None] * len(contents)]


def test_sessions_are_read_apart_but_names_together():
    first = ["Hey Jo, how was the trip?", "Great, Nate! The mountains were amazing."]
    second = ["Hi Joanna, any news?", "Not much, Nate, just writing."]

    speakers = sessions_speakers([unknown(first), unknown(second)])

    assert speakers == [["Nate", "Joanna"], ["Nate", "Joanna"]]


@pytest.fixture
def agent(tenant, make_agent):
    return make_agent(tenant, name="Talker")


def drafts(contents, session="s1", **fields):
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    return [
        MemoryDraft(content=content, session_id=session, occurred_at=when, **fields)
        for content in contents
    ]


@pytest.mark.django_db
def test_the_embedder_sees_the_speaker_the_session_shows(agent):
    batch = drafts(CONVERSATION)

    texts = memory_embedding_texts(
        tenant_id=agent.tenant_id, agent_id=agent.pk, memories=batch, ids=[0] * len(batch)
    )

    assert texts[0] == f"[8 May 2023] Caroline: {CONVERSATION[0]}"
    assert texts[1] == f"[8 May 2023] Melanie: {CONVERSATION[1]}"


@pytest.mark.django_db
def test_metadata_speaker_and_role_stand_where_nothing_is_inferred(agent):
    batch = drafts(["Bought milk."], metadata={"speaker": "Ann"}) + drafts(
        ["The meeting moved."], session=""
    )

    texts = memory_embedding_texts(
        tenant_id=agent.tenant_id, agent_id=agent.pk, memories=batch, ids=[0, 0]
    )

    assert texts == ["[8 May 2023] Ann: Bought milk.", "[8 May 2023] user: The meeting moved."]


@pytest.mark.django_db
def test_a_memory_stored_alone_is_read_in_its_stored_session(agent, no_embedder):
    memories_store(agent=agent, drafts=drafts(CONVERSATION[:-1]), actor="x")
    [last] = drafts(CONVERSATION[-1:])

    [text] = memory_embedding_texts(
        tenant_id=agent.tenant_id, agent_id=agent.pk, memories=[last], ids=[0]
    )

    assert text == f"[8 May 2023] Caroline: {CONVERSATION[-1]}"


@pytest.mark.django_db
def test_another_agents_sessions_are_never_read(tenant, agent, make_agent, no_embedder):
    other = make_agent(tenant, name="Other")
    memories_store(agent=other, drafts=drafts(CONVERSATION[:-1]), actor="x")
    [last] = drafts(CONVERSATION[-1:])

    [text] = memory_embedding_texts(
        tenant_id=agent.tenant_id, agent_id=agent.pk, memories=[last], ids=[0]
    )

    assert text == f"[8 May 2023] user: {CONVERSATION[-1]}"


def own_line_lexemes(memory):
    """The lexemes of the memory's own line (weight A) in its keyword document."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT array(SELECT lexeme FROM unnest(ts_filter(search_vector, '{a}'))) "
            "FROM memory_memory WHERE id = %s",
            [memory.pk],
        )
        return set(cursor.fetchone()[0])


@pytest.mark.django_db
def test_the_store_keeps_the_inferred_speaker_for_the_keyword_index(agent, no_embedder):
    stored = memories_store(agent=agent, drafts=drafts(CONVERSATION), actor="x")

    assert [m.speaker for m in Memory.objects.filter(agent=agent).order_by("id")] == [
        "Caroline",
        "Melanie",
    ] * 3 + ["Caroline"]
    # "I went to a support group yesterday": said by Caroline, who is not named in it.
    assert "carolin" in own_line_lexemes(stored[2])
    assert "user" not in own_line_lexemes(stored[2])


@pytest.mark.django_db
def test_a_rebuild_infers_the_speakers_again(tenant, agent, no_embedder):
    stored = memories_store(agent=agent, drafts=drafts(CONVERSATION), actor="x")
    Memory.objects.filter(pk=stored[2].pk).delete()

    projection_rebuild(projection=memories_projection(), tenant=tenant)

    rebuilt = Memory.objects.get(pk=stored[2].pk)
    assert rebuilt.speaker == "Caroline"
    assert "carolin" in own_line_lexemes(rebuilt)


def memories_projection():
    return next(p for p in registered_projections() if p.name == "memories")
