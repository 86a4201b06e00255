"""Admin keys are always tenant-wide (issue 18): existing agent-scoped admin keys become reviewer
keys, each with an ``api_key.role_changed`` event, and the database refuses new ones.

Reviewer, not a revocation: the key keeps working for what it can still do as its agent, so no
client breaks at upgrade, and it loses only what reaches beyond its agent (which the permission
layer now refuses any agent-scoped key anyway).
"""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.utils import timezone

REASON = (
    "An agent-scoped key cannot hold the admin role: admin keys are always tenant-wide. "
    "Downgraded at upgrade; create a tenant-wide admin key if this one needed admin rights."
)


def agent_scoped_admin_keys_downgrade(apps: Any, schema_editor: Any) -> None:
    # The historical models, and the chain's own hash function (a stable, versioned format), so
    # the events verify like any other; the lock is the one every append takes.
    from ledger.chain import event_hash
    from ledger.services import SYSTEM_ACTOR, tenant_write_lock_id

    api_key_model = apps.get_model("ledger", "ApiKey")
    event_model = apps.get_model("ledger", "Event")
    scoped_admins = (
        api_key_model.objects.filter(role="admin", agent__isnull=False)
        .select_related("agent")
        .order_by("tenant_id", "id")
    )
    for api_key in scoped_admins:
        tenant_write_lock_id(api_key.tenant_id)
        api_key_model.objects.filter(pk=api_key.pk).update(role="reviewer")
        head = (
            event_model.objects.filter(tenant_id=api_key.tenant_id)
            .order_by("-seq")
            .values_list("seq", "hash")
            .first()
        )
        seq, prev_hash = head if head is not None else (0, "0" * 64)
        fields = {
            "seq": seq + 1,
            "run_id": "",
            "round_id": "",
            "turn": 0,
            "actor": SYSTEM_ACTOR,
            "kind": "api_key.role_changed",
            "payload": {
                "key_id": api_key.pk,
                "prefix": api_key.prefix,
                "agent": api_key.agent.name,
                "from": "admin",
                "to": "reviewer",
                "reason": REASON,
            },
            "created_at": timezone.now(),
            "prev_hash": prev_hash,
        }
        event_model.objects.create(
            tenant_id=api_key.tenant_id,
            hash=event_hash(tenant_id=api_key.tenant_id, **fields),
            **fields,
        )


class Migration(migrations.Migration):
    dependencies = [("ledger", "0009_agent_name_key")]

    operations = [
        migrations.RunPython(agent_scoped_admin_keys_downgrade, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="apikey",
            name="agent",
            field=models.ForeignKey(
                blank=True,
                help_text="When set, the key acts as this agent and never reaches beyond it (its "
                "role is then agent or reviewer: admin keys are tenant-wide).",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="api_keys",
                to="ledger.agent",
            ),
        ),
        migrations.AddConstraint(
            model_name="apikey",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("agent__isnull", True),
                    models.Q(("role", "admin"), _negated=True),
                    _connector="OR",
                ),
                name="api_key_admin_is_tenant_wide",
                violation_error_code="agent_scoped_admin_key",
                violation_error_message="An admin key is always tenant-wide: leave the agent "
                "empty, or give a key that acts as an agent the role agent or reviewer.",
            ),
        ),
    ]
