"""Agent names unique without regard to case or look-alike characters (ledger.names).

Adds ``Agent.name_key`` and makes it, not the name, unique per tenant. Installs made before this
may hold agents that the new rule refuses: names that share a key (``alpha`` and ``ALPHA``), or
that are invalid on their own (``system``, ``human:bob``, hidden characters, mixed scripts). Those
agents are renamed here, each by an ``agent.updated`` event from ``system`` (with a ``reason``),
exactly as an admin's rename would be logged, so a rebuild of the agents projection replays the
same names. Per tenant, the oldest agent (lowest id) with a valid name keeps it; every other agent
in the way takes the first free valid name of: its name in normal form, that form with ``-<id>``
appended, ``agent-<id>``, ``agent-<id>-2``, ... A renamed agent's past events keep its old name
as their actor; its agent-scoped keys act under the new one from now on.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.utils import timezone

from ledger.chain import event_hash
from ledger.names import (
    AGENT_NAME_KEY_MAX_LENGTH,
    AGENT_NAME_MAX_LENGTH,
    SYSTEM_ACTOR,
    agent_name_key,
    agent_name_problem,
    name_normal_form,
)

GENESIS_HASH = "0" * 64
RENAME_REASON = (
    "agent names became unique without regard to case or look-alike characters, and free of "
    "invisible characters, mixed scripts and actor forms (ledger migration 0009)"
)


def _valid(name: str) -> bool:
    return name == name_normal_form(name) and agent_name_problem(name) is None


def _candidates(name: str, agent_id: int) -> Any:
    normal = name_normal_form(name)
    if agent_name_problem(normal) is None:
        yield normal
        suffix = f"-{agent_id}"
        yield normal[: AGENT_NAME_MAX_LENGTH - len(suffix)] + suffix
    yield f"agent-{agent_id}"
    number = 2
    while True:
        yield f"agent-{agent_id}-{number}"
        number += 1


def _renamed(agent_model: Any) -> dict[int, list[tuple[Any, str]]]:
    """The renames each tenant needs, as (agent, new name), and every agent's key set."""
    renames: dict[int, list[tuple[Any, str]]] = {}
    tenant_ids = agent_model.objects.values_list("tenant_id", flat=True).distinct().order_by()
    for tenant_id in tenant_ids:
        agents = list(agent_model.objects.filter(tenant_id=tenant_id).order_by("id"))
        taken: set[str] = set()
        in_the_way = []
        for agent in agents:
            key = agent_name_key(agent.name)
            if _valid(agent.name) and key not in taken:
                taken.add(key)
                agent.name_key = key
            else:
                in_the_way.append(agent)
        for agent in in_the_way:
            for candidate in _candidates(agent.name, agent.pk):
                key = agent_name_key(candidate)
                if _valid(candidate) and key not in taken:
                    break
            taken.add(key)
            renames.setdefault(tenant_id, []).append((agent, candidate))
            agent.name, agent.name_key = candidate, key
        for agent in agents:
            agent_model.objects.filter(pk=agent.pk).update(name=agent.name, name_key=agent.name_key)
    return renames


def _append_renames(
    event_model: Any, schema_editor: Any, tenant_id: int, renames: list[tuple[Any, str]]
) -> None:
    """Append one ``agent.updated`` per rename to the tenant's chain, as events_append would.

    Written against the historical model rather than through ledger.services, whose models are
    today's: a later migration may add a column the database does not have yet at this point.
    """
    with schema_editor.connection.cursor() as cursor:
        # The tenant's ledger lock (ledger.services.tenant_write_lock), against a running writer.
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('agent-memory:ledger:' || %s, 0))",
            [tenant_id],
        )
    head = (
        event_model.objects.filter(tenant_id=tenant_id)
        .order_by("-seq")
        .values_list("seq", "hash")
        .first()
    )
    seq, prev_hash = head if head is not None else (0, GENESIS_HASH)
    now = timezone.now()
    for agent, new_name in renames:
        seq += 1
        payload = {
            "agent_id": agent.pk,
            "changes": {"name": new_name},
            "reason": RENAME_REASON,
        }
        fields = {
            "seq": seq,
            "run_id": "",
            "round_id": "",
            "turn": 0,
            "actor": SYSTEM_ACTOR,
            "kind": "agent.updated",
            "payload": payload,
            "created_at": now,
            "prev_hash": prev_hash,
        }
        digest = event_hash(tenant_id=tenant_id, **fields)
        event_model.objects.create(tenant_id=tenant_id, hash=digest, **fields)
        prev_hash = digest


def repair_agent_names(apps: Any, schema_editor: Any) -> None:
    renames = _renamed(apps.get_model("ledger", "Agent"))
    event_model = apps.get_model("ledger", "Event")
    for tenant_id, tenant_renames in renames.items():
        _append_renames(event_model, schema_editor, tenant_id, tenant_renames)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0008_job_schedules")]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="name_key",
            field=models.CharField(
                default="", editable=False, max_length=AGENT_NAME_KEY_MAX_LENGTH
            ),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="agent",
            name="name",
            field=models.CharField(
                help_text="The orchestrator's name for it; unique per tenant, look-alikes included.",
                max_length=AGENT_NAME_MAX_LENGTH,
            ),
        ),
        migrations.RunPython(repair_agent_names, migrations.RunPython.noop, elidable=False),
        migrations.RemoveConstraint(model_name="agent", name="agent_name_unique_per_tenant"),
        migrations.AddConstraint(
            model_name="agent",
            constraint=models.UniqueConstraint(
                fields=("tenant", "name_key"), name="agent_name_key_per_tenant"
            ),
        ),
    ]
