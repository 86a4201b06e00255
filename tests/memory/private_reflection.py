"""An agent's reflection over its private thoughts, for the tests that check no other agent
meets it (issue 18, item 5): the isolation matrices, memory search and the pages."""

from __future__ import annotations

from ledger.models import Agent, Event
from ledger.services import EventDraft, events_append
from memory.embeddings.services import event_embeddings_build
from memory.recall.services import reflection_create_if_due

SECRET = "periwinkle"
# What the thoughts and their reflection say; queries name the word but never say this.
SECRET_LINE = f"The secret word is {SECRET}."
SECRET_QUERY = f"the secret word {SECRET}"
RUN = "r"


def private_reflection_made(agent: Agent, thoughts: int = 10) -> Event:
    """``thoughts`` private thoughts of the agent naming the secret, then its reflection over
    them (due at the default threshold of ten), in the semantic index."""
    events_append(
        tenant=agent.tenant,
        drafts=[
            EventDraft(
                kind="agent.thought",
                actor=agent.name,
                run_id=RUN,
                turn=turn,
                payload={"text": SECRET_LINE},
            )
            for turn in range(thoughts)
        ],
    )
    made = reflection_create_if_due(agent=agent, run_id=RUN, force=thoughts < 10)
    assert made is not None
    assert SECRET_LINE in made.text
    event_embeddings_build(event_ids=[made.pk])
    return made
