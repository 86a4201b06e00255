"""Start-up checks: refuse to run a deployment the search cannot serve.

Two mismatches used to pass silently. A pgvector older than 0.8 has no iterative index scans,
which the search plans set (``hnsw.iterative_scan``, memory/selectors.py): filtered searches then
come back short. An embedder whose vectors do not fit the vector columns (a 768-dimension model
against ``vector(384)``) had every memory stored without a vector, found by keywords only.

Both are Django system checks (``id`` ``agent_memory.E00x``). The settings check runs with every
management command, ``runserver`` and ``up`` included; the database checks run where Django runs
database checks (``migrate``, ``check --database default``); column sizes are compared once no
migration is pending, so ``migrate`` is never stopped by what it is about to change.
``deployment_verify`` runs them all and stops the process; the WSGI application (gunicorn,
runserver), the Celery worker and ``up`` call it at start. A database that cannot be reached is
no mismatch: the start goes on, and the outage handling (config/outage.py) answers 503 until it
is back.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

logger = logging.getLogger(__name__)

TAG = "agent_memory_deployment"
# Iterative index scans (hnsw.iterative_scan) arrived in pgvector 0.8.0.
PGVECTOR_MIN_VERSION = (0, 8, 0)
DOCS = "docs/embeddings.md#dimensions"


class DeploymentMismatch(ImproperlyConfigured):
    """The deployment cannot serve the search; the message says what to change."""


def vector_columns() -> list[tuple[str, str, int]]:
    """(table, column, dimensions) of every sized vector column of the installed models."""
    from pgvector.django import VectorField

    found = []
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            if isinstance(field, VectorField) and field.dimensions is not None:
                found.append((model._meta.db_table, field.column, int(field.dimensions)))
    return sorted(found)


def embedder_dimensions() -> tuple[str, int]:
    """The configured embedder's name and the size of its vectors, without loading a model."""
    if settings.EMBEDDING_BACKEND == "openai":
        return f"EMBEDDING_BACKEND=openai ({settings.EMBEDDING_MODEL or 'default model'})", int(
            settings.EMBEDDING_DIMENSIONS
        )
    from memory.embeddings.local_embedder import DIMENSIONS, configured_model

    return f"the local model {configured_model()}", DIMENSIONS


def local_model_problem() -> str | None:
    from memory.embeddings.local_embedder import LOCAL_MODELS, configured_model

    if settings.EMBEDDING_BACKEND != "local" or configured_model() in LOCAL_MODELS:
        return None
    return (
        f"EMBEDDING_MODEL={settings.EMBEDDING_MODEL} names no local model: with "
        f"EMBEDDING_BACKEND=local use {' or '.join(LOCAL_MODELS)}, or leave it empty for the "
        f"first; see {DOCS}."
    )


def settings_problems(columns: Sequence[tuple[str, str, int]]) -> list[str]:
    model = local_model_problem()
    if model:
        return [model]
    sizes = sorted({dimensions for _, _, dimensions in columns})
    if not sizes:
        return []
    if len(sizes) > 1:
        return [f"The vector columns disagree on their size ({sizes}); see {DOCS}."]
    (size,) = sizes
    problems = []
    if size != settings.EMBEDDING_DIMENSIONS:
        problems.append(
            f"EMBEDDING_DIMENSIONS={settings.EMBEDDING_DIMENSIONS}, but the vector columns hold "
            f"{size} dimensions and are sized in the migrations, not by this setting. Set "
            f"EMBEDDING_DIMENSIONS={size} and use a {size}-dimension model (OpenAI's "
            f"text-embedding-3 models shorten theirs when asked); see {DOCS}."
        )
        return problems
    name, given = embedder_dimensions()
    if given != size:
        problems.append(
            f"{name} gives {given}-dimension vectors; the vector columns hold {size}. See {DOCS}."
        )
    return problems


def pgvector_version_problem(version: str | None) -> str | None:
    if version is None:
        return (
            "The pgvector extension is not available on the database server: install pgvector "
            f"{'.'.join(map(str, PGVECTOR_MIN_VERSION))} or later (docs/operations.md)."
        )
    parts = tuple(int(number) for number in re.findall(r"\d+", version)[:3])
    if parts < PGVECTOR_MIN_VERSION:
        wanted = ".".join(map(str, PGVECTOR_MIN_VERSION))
        return (
            f"pgvector {version} is too old: the search plans need its iterative index scans, "
            f"which came in {wanted}. Upgrade the extension to {wanted} or later "
            "(ALTER EXTENSION vector UPDATE after installing it) and start again."
        )
    return None


def pgvector_version(cursor: Any) -> str | None:
    """The installed pgvector's version, else the one CREATE EXTENSION would install."""
    cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    row = cursor.fetchone()
    if row is None:
        cursor.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def column_problems(cursor: Any, columns: Sequence[tuple[str, str, int]]) -> list[str]:
    """Columns whose size in the database differs from the code's (tables not made yet pass)."""
    cursor.execute(
        "SELECT c.relname, a.attname, a.atttypmod FROM pg_attribute a"
        " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_type t ON t.oid = a.atttypid"
        " WHERE t.typname = 'vector' AND NOT a.attisdropped AND pg_table_is_visible(c.oid)"
        " AND c.relname = ANY(%s)",
        [sorted({table for table, _, _ in columns})],
    )
    # pgvector keeps a column's dimensions as its type modifier (-1: unsized).
    in_database = {(table, column): typmod for table, column, typmod in cursor.fetchall()}
    problems = []
    for table, column, dimensions in columns:
        found = in_database.get((table, column))
        if found is not None and found != dimensions:
            size = "no fixed size" if found < 0 else f"vector({found})"
            problems.append(
                f"{table}.{column} is {size} in the database, vector({dimensions}) in the code: "
                "the database was made by another version. Run `manage.py migrate`, or restore "
                f"a database of this version; see {DOCS}."
            )
    return problems


def migrations_pending(alias: str = DEFAULT_DB_ALIAS) -> bool:
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[alias])
    return bool(executor.migration_plan(executor.loader.graph.leaf_nodes()))


def database_problems(
    alias: str = DEFAULT_DB_ALIAS, columns: Sequence[tuple[str, str, int]] | None = None
) -> list[str]:
    try:
        with connections[alias].cursor() as cursor:
            problem = pgvector_version_problem(pgvector_version(cursor))
            # Columns of another size are what a pending migration may change: `migrate`, which
            # runs these checks first, must not be stopped by what it is about to fix.
            found = (
                []
                if migrations_pending(alias)
                else column_problems(cursor, vector_columns() if columns is None else columns)
            )
    except DatabaseError as exc:
        logger.warning("start-up checks skipped the database, unreachable: %s", exc)
        return []
    return ([problem] if problem else []) + found


@checks.register(TAG)
def deployment_check(
    app_configs: Iterable[Any] | None = None,
    databases: Iterable[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    columns = vector_columns()
    messages: list[checks.CheckMessage] = [
        checks.Error(problem, id="agent_memory.E001") for problem in settings_problems(columns)
    ]
    for alias in databases or ():
        messages += [
            checks.Error(problem, id="agent_memory.E002")
            for problem in database_problems(alias, columns)
        ]
    return messages


def deployment_verify() -> None:
    """Raise DeploymentMismatch, naming every problem, unless this deployment can serve."""
    errors = [
        message
        for message in checks.run_checks(databases=[DEFAULT_DB_ALIAS], tags=[TAG])
        if message.is_serious()
    ]
    if errors:
        lines = "\n".join(f"  - {error.msg}" for error in errors)
        raise DeploymentMismatch(f"Agent Memory refuses to start:\n{lines}")
