"""Idempotency records belong to the API key that made the request, not to its tenant (issue
18): a replay is only ever for the principal that made the first request.

The stored answers of the old, tenant-wide records are dropped: which key made them is not
recorded, and replaying them to the wrong key is the leak this closes. They live at most
``IDEMPOTENCY_RETENTION_HOURS``; a retry of a request made before the upgrade runs again.
"""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models


def tenant_wide_records_drop(apps: Any, schema_editor: Any) -> None:
    apps.get_model("ledger", "IdempotencyRecord").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("ledger", "0010_api_key_admin_is_tenant_wide")]

    operations = [
        migrations.RunPython(tenant_wide_records_drop, migrations.RunPython.noop),
        migrations.RemoveConstraint(
            model_name="idempotencyrecord", name="idempotency_key_per_tenant"
        ),
        migrations.AddField(
            model_name="idempotencyrecord",
            name="api_key",
            field=models.ForeignKey(
                default=None,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="ledger.apikey",
            ),
            preserve_default=False,
        ),
        migrations.AddConstraint(
            model_name="idempotencyrecord",
            constraint=models.UniqueConstraint(
                fields=("api_key", "key"), name="idempotency_key_per_api_key"
            ),
        ),
    ]
