"""The long commands: --json prints one machine-readable summary; a bar only on a terminal."""

from __future__ import annotations

import io
import json
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.models import Agent
from ledger.projections import registered_projections
from tests.ledger.test_anchors import delete_events
from tests.ledger.test_chain import append_n

pytestmark = pytest.mark.django_db


def _tampered_by_another_connection(test):
    # tamper() edits through a connection of its own, which waits on an open test transaction.
    return pytest.mark.django_db(transaction=True)(test)


def _json(*args, expect_failure=False):
    out = StringIO()
    if expect_failure:
        with pytest.raises(CommandError) as raised:
            call_command(*args, "--json", stdout=out)
        assert raised.value.returncode == 1
    else:
        call_command(*args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_verify_ledger_json_reports_every_tenant(tenant, other_tenant):
    append_n(tenant, 3)

    summary = _json("verify_ledger", "--checkpoint")

    assert summary["ok"] is True
    by_slug = {item["tenant"]: item for item in summary["tenants"]}
    assert set(by_slug) == {tenant.slug, other_tenant.slug}
    assert by_slug[tenant.slug]["ok"] is True
    assert by_slug[tenant.slug]["events_checked"] >= 3
    assert by_slug[tenant.slug]["checkpoint_signed_now"] is True
    assert by_slug[tenant.slug]["code"] == ""
    assert summary["events_checked"] == sum(item["events_checked"] for item in summary["tenants"])
    assert summary["tenants_gone"] == []


@_tampered_by_another_connection
def test_verify_ledger_json_names_the_break_and_still_exits_1(tenant):
    events = append_n(tenant, 3)
    call_command("verify_ledger", "--checkpoint", stdout=StringIO())
    delete_events(tenant, from_seq=events[-1].seq)

    summary = _json("verify_ledger", expect_failure=True)

    assert summary["ok"] is False
    (report,) = [item for item in summary["tenants"] if item["tenant"] == tenant.slug]
    assert report["ok"] is False
    assert report["code"] == "ledger_truncated"
    assert report["first_broken_seq"] == events[-1].seq


def test_rebuild_projections_json_lists_each_projection_and_what_differed(tenant, make_agent):
    agent = make_agent(tenant, name="Creator1", model="m1")
    Agent.objects.filter(pk=agent.pk).update(model="tampered")

    summary = _json("rebuild_projections", "--check", "--tenant", tenant.slug, expect_failure=True)

    assert summary["check"] is True
    assert summary["written"] is False
    assert summary["ok"] is False
    assert summary["differing"] == [f"{tenant.slug}/agents"]
    assert {(r["projection"], r["equal"]) for r in summary["results"]} == {
        (p.name, p.name != "agents") for p in registered_projections()
    }
    assert Agent.objects.get(pk=agent.pk).model == "tampered"


def test_rebuild_projections_json_after_a_rebuild(tenant, make_agent):
    make_agent(tenant, name="Creator1", model="m1")

    summary = _json("rebuild_projections", "--tenant", tenant.slug, "--projection", "agents")

    assert summary == {
        "check": False,
        "written": True,
        "ok": True,
        "results": [{"tenant": tenant.slug, "projection": "agents", "equal": True}],
        "differing": [],
    }


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_a_progress_bar_is_drawn_on_a_terminal_only(tenant, monkeypatch, terminal):
    append_n(tenant, 2)
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    out = StringIO()

    call_command("verify_ledger", stdout=out, stderr=StringIO())

    drawn = stderr.getvalue()
    if terminal:
        assert "verify" in drawn
        assert "1/1" in drawn
    else:
        assert drawn == ""
    # The bar never reaches stdout, whose lines stay whole.
    assert out.getvalue().startswith(f"{tenant.slug}: ok")
