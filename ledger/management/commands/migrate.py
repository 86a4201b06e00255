"""``migrate`` as the owner of the tables, then the service's role gets what it needs and no more.

Django's own command, wrapped: it connects as the owner (``DATABASE_MIGRATE_URL``, or the
embedded ``agent_memory_owner``) for the migrations, grants the service's role row access with
``config.database.app_role_privileges_grant`` (SELECT and INSERT only on the ledger's events),
and warns when the service's role could still bypass the ledger's triggers. Every way the schema
is migrated (``up``, the compose ``migrate`` service, the test database) goes through here.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from django.core.management.commands import migrate
from django.db import connections

from config.database import (
    app_role_privileges_grant,
    database_as_owner,
    database_owner_settings,
    database_role_warnings,
)
from config.embedded import quote_identifier
from ledger.jobs import job_schedules_ensure


class Command(migrate.Command):
    help = (
        "Migrate as the database owner (DATABASE_MIGRATE_URL, or the embedded owner role), then "
        "grant the service's role row access and only SELECT/INSERT on the ledger's events."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["database"]
        owner = database_owner_settings()
        app_password = str(connections[alias].settings_dict.get("PASSWORD") or "")
        with database_as_owner(alias):
            if owner is not None:
                self._app_role_ensure(alias, app_password)
            super().handle(*args, **options)
            if "django_celery_beat_periodictask" in connections[alias].introspection.table_names():
                # A job added since the seeding migration gets its default schedule here too,
                # for deployments that never run `up` (docker compose).
                job_schedules_ensure()
            if owner is not None:
                with connections[alias].cursor() as cursor:
                    app_role_privileges_grant(
                        cursor, app_role=settings.DATABASE_APP_ROLE, owner_role=owner["USER"]
                    )
        for line in database_role_warnings(alias):
            self.stderr.write(line)

    def _app_role_ensure(self, alias: str, password: str) -> None:
        """Create the service's role from DATABASE_URL when it does not exist and the owner may.

        The embedded server's roles exist already; this is for a compose-style database whose
        owner can create roles. Anyone else creates it as docs/operations.md shows.
        """
        role = settings.DATABASE_APP_ROLE
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s),"
                " (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user)",
                [role],
            )
            exists, may_create = cursor.fetchone()
            if exists:
                return
            if not may_create:
                raise CommandError(
                    f"The database role {role!r} of DATABASE_URL does not exist and the owner "
                    "role may not create it; create it as docs/operations.md shows."
                )
            # A SCRAM verifier computed here: the password itself never reaches the server's log.
            verifier = connections[alias].connection.pgconn.encrypt_password(
                password.encode(), role.encode(), b"scram-sha-256"
            )
            cursor.execute(
                f"CREATE ROLE {quote_identifier(role)} LOGIN NOSUPERUSER NOCREATEDB "
                "NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD %s",
                [verifier.decode()],
            )
            self.stdout.write(f"Created the service's database role {role!r}.")
