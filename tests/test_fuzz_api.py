"""API fuzzing with schemathesis from the service's own OpenAPI schema.

Every operation is called with generated requests, valid and invalid (schemathesis's positive and
negative modes), once with a tenant admin's key and once with an agent-scoped key of the same
tenant. Every answer must be no 5xx, have a status the schema lists, and a body that matches the
schema (error bodies included: ``config.schema`` documents them).

The run here is bounded (``FUZZ_MAX_EXAMPLES`` per operation, 1 by default, derandomized so CI
is repeatable); ``bench/fuzz_api.py`` runs the same test longer with fresh randomness.

Schemathesis's boundary (coverage) cases walk every leaf of a schema, and the recursive memory
filter (``filter[NOT][NOT][NOT][id]``, ``filter[OR][0][AND]`` ...) gives the three operations that
take it 3,000-4,000 cases each, nearly all of them the same few leaves at another depth. The
bounded run sends an operation's first ``FUZZ_BOUNDARY_CASES_IN_FULL`` (200) boundary cases and
then one in ``FUZZ_BOUNDARY_SAMPLE_EVERY`` (10), picked by a hash of the case, so the sample is
the same on every run; ``bench/fuzz_api.py`` sends them all.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.conf import settings
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation.meta import TestPhase

from ledger import services
from ledger.models import Role

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "1"))
DERANDOMIZE = os.environ.get("FUZZ_RANDOM", "") == ""
BOUNDARY_CASES_IN_FULL = int(os.environ.get("FUZZ_BOUNDARY_CASES_IN_FULL", "200"))
BOUNDARY_SAMPLE_EVERY = int(os.environ.get("FUZZ_BOUNDARY_SAMPLE_EVERY", "10"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

# The application without config.wsgi's start-up checks: they query the database, which
# pytest-django opens only inside tests, and tests/test_startup_checks.py covers them.
application = get_wsgi_application()
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)

# What the run did, written next to the test logs for bench/fuzz_api.py and docs/reliability.md.
TALLY: Counter[str] = Counter()
BOUNDARY_CASES_SEEN: Counter[str] = Counter()


def boundary_case_skipped(case: Any) -> bool:
    """Whether the bounded run leaves out this boundary case (see the module's docstring)."""
    phase = case.meta.phase if case.meta is not None else None
    if phase is None or phase.name != TestPhase.COVERAGE:
        return False
    label = case.operation.label
    BOUNDARY_CASES_SEEN[label] += 1
    if BOUNDARY_CASES_SEEN[label] <= BOUNDARY_CASES_IN_FULL:
        return False
    shape = repr((label, phase.data.description, case.query, case.body, case.headers))
    digest = int.from_bytes(hashlib.sha256(shape.encode()).digest()[:8], "big")
    return digest % max(BOUNDARY_SAMPLE_EVERY, 1) != 0


@pytest.fixture(scope="module", autouse=True)
def _fuzz_summary() -> Iterator[None]:
    yield
    path = settings.EMBEDDED.log_dir / "fuzz-summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(TALLY.items())), indent=2))


@pytest.fixture
def _in_test_transaction(db: None) -> Iterator[None]:
    """Calls go straight to the WSGI app, not through Django's test client; like that client,
    keep the app from closing the connection that holds this test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_keys(_in_test_transaction: None, settings: Any) -> dict[str, str]:
    """An admin key and an agent-scoped key of one tenant, with an agent of each kind of use."""
    # The limiter still counts every call, but an operation's thousands of cases within a minute
    # must reach the operation, not a 429 (tests/test_security.py covers the refusal).
    settings.API_RATE_LIMIT = 1_000_000
    tenant = services.tenant_create(name="Fuzz", slug="fuzz")
    agent = services.agent_create(tenant=tenant, name="Fuzzer", actor="system")
    services.agent_create(tenant=tenant, name="Other", actor="system")
    _, admin = services.api_key_create(
        tenant=tenant, name="admin", role=Role.ADMIN, agent=None, actor="system"
    )
    _, scoped = services.api_key_create(
        tenant=tenant, name="agent", role=Role.AGENT, agent=agent, actor="system"
    )
    return {"admin": admin, "agent": scoped}


@schema.parametrize()
@hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=DERANDOMIZE,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_within_its_schema(case: Any, fuzz_keys: dict[str, str]) -> None:
    if boundary_case_skipped(case):
        TALLY["boundary cases left out"] += 1
        return
    for who, key in fuzz_keys.items():
        # Each call in a savepoint rolled back afterwards: every case starts from the fixture's
        # rows, and a statement PostgreSQL refused (answered 400) cannot leave the test's
        # transaction aborted for the next case, as it cannot in production (autocommit).
        with transaction.atomic():
            response = case.call(headers={"Authorization": f"Bearer {key}"})
            transaction.set_rollback(True)
        TALLY["cases"] += 1
        TALLY[f"status {response.status_code}"] += 1
        TALLY[f"key {who}"] += 1
        case.validate_response(response, checks=CHECKS)
