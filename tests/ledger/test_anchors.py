"""Checkpoints outside the database catch what the hash chain alone cannot: a removed tail and a
rewritten tail whose hashes were recomputed.

The attacker here holds the table owner's password (tests/tampering.py): the service's own role
cannot change an event at all (tests/test_database_roles.py).
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from ledger import anchors
from ledger.anchors import chain_checkpoint, checkpoint_append, checkpoints_read
from ledger.models import Event, JobRun, Role
from ledger.selectors import event_chain_verify
from tests.ledger.test_chain import append_n
from tests.tampering import events_delete, rewrite_tail, tamper

pytestmark = pytest.mark.django_db(transaction=True)


def anchor_file(tenant) -> Path:
    return Path(settings.LEDGER_ANCHOR_DIR) / f"tenant-{tenant.pk}.jsonl"


def delete_events(tenant, *, from_seq: int) -> None:
    events_delete("tenant_id = %s AND seq >= %s", [tenant.pk, from_seq])


def test_a_checkpoint_signs_the_verified_head_into_a_file_outside_the_database(tenant):
    events = append_n(tenant, 3)

    report = chain_checkpoint(tenant=tenant)

    assert report.ok
    log = checkpoints_read(tenant_id=tenant.pk)
    assert [(c.seq, c.hash) for c in log.checkpoints] == [(events[-1].seq, events[-1].hash)]
    line = json.loads(anchor_file(tenant).read_text())
    assert {"tenant", "seq", "hash", "signed_at", "key", "sig"} <= set(line)
    assert anchor_file(tenant).stat().st_mode & 0o777 == 0o600
    assert anchor_file(tenant).parent.stat().st_mode & 0o777 == 0o700


def test_a_checkpoint_is_written_only_when_the_head_moved(tenant):
    append_n(tenant, 2)
    chain_checkpoint(tenant=tenant)
    chain_checkpoint(tenant=tenant)
    append_n(tenant, 1)
    chain_checkpoint(tenant=tenant)

    seqs = [c.seq for c in checkpoints_read(tenant_id=tenant.pk).checkpoints]
    assert seqs == [3, 4]


def test_a_deleted_last_event_is_named_truncation(tenant):
    events = append_n(tenant, 3)
    chain_checkpoint(tenant=tenant)

    delete_events(tenant, from_seq=events[-1].seq)
    report = event_chain_verify(tenant=tenant)

    assert not report.ok
    assert report.code == "ledger_truncated"
    assert report.first_broken_seq == events[-1].seq
    assert f"recorded event #{events[-1].seq}" in report.reason


def test_a_rehashed_tail_is_named_a_checkpoint_mismatch(tenant):
    events = append_n(tenant, 5)
    chain_checkpoint(tenant=tenant)

    rewrite_tail(tenant, from_seq=events[2].seq, payload={"text": "forged"})
    # The chain inside the database holds again: only the checkpoint knows better.
    assert Event.objects.get(tenant=tenant, seq=events[2].seq).payload == {"text": "forged"}
    report = event_chain_verify(tenant=tenant)

    assert not report.ok
    assert (report.code, report.first_broken_seq) == ("checkpoint_mismatch", events[-1].seq)
    assert "rewritten" in report.reason


def test_a_rewrite_is_placed_after_the_last_checkpoint_that_holds(tenant):
    append_n(tenant, 3)
    chain_checkpoint(tenant=tenant)  # head 4
    events = append_n(tenant, 3)
    chain_checkpoint(tenant=tenant)  # head 7

    rewrite_tail(tenant, from_seq=events[1].seq, payload={"text": "forged"})
    report = event_chain_verify(tenant=tenant)

    assert (report.code, report.first_broken_seq) == ("checkpoint_mismatch", 7)
    assert "after event #4" in report.reason


def test_a_truncated_and_rehashed_tail_is_still_caught(tenant):
    events = append_n(tenant, 5)
    chain_checkpoint(tenant=tenant)

    delete_events(tenant, from_seq=events[3].seq)
    rewrite_tail(tenant, from_seq=events[1].seq, payload={"text": "forged"})
    report = event_chain_verify(tenant=tenant)

    assert report.code == "ledger_truncated"


def test_the_frequent_check_refuses_to_sign_a_tampered_tail(tenant):
    append_n(tenant, 2)
    chain_checkpoint(tenant=tenant)
    events = append_n(tenant, 2)
    tamper(
        "UPDATE ledger_event SET payload = %s::jsonb WHERE id = %s",
        ['{"text": "forged"}', events[0].pk],
    )

    report = chain_checkpoint(tenant=tenant)

    assert (report.code, report.first_broken_seq) == ("hash_mismatch", events[0].seq)
    assert [c.seq for c in checkpoints_read(tenant_id=tenant.pk).checkpoints] == [3]


def test_the_frequent_check_notices_truncation_below_its_last_checkpoint(tenant):
    events = append_n(tenant, 3)
    chain_checkpoint(tenant=tenant)

    delete_events(tenant, from_seq=events[1].seq)
    report = chain_checkpoint(tenant=tenant)

    assert report.code == "ledger_truncated"


def test_the_frequent_check_notices_a_rehashed_tail(tenant):
    events = append_n(tenant, 3)
    chain_checkpoint(tenant=tenant)

    rewrite_tail(tenant, from_seq=events[0].seq, payload={"text": "forged"})
    report = chain_checkpoint(tenant=tenant)

    assert (report.code, report.first_broken_seq) == ("checkpoint_mismatch", events[-1].seq)


def test_an_edited_checkpoint_is_not_trusted(tenant):
    append_n(tenant, 2)
    chain_checkpoint(tenant=tenant)
    line = json.loads(anchor_file(tenant).read_text())
    line["seq"] = 1  # point the checkpoint at an older event, as someone covering tracks would
    anchor_file(tenant).write_text(json.dumps(line) + "\n")

    report = event_chain_verify(tenant=tenant)

    assert report.code == "checkpoint_invalid"
    assert "signature" in report.reason


def test_a_checkpoint_signed_by_another_key_is_not_trusted(tenant, settings):
    append_n(tenant, 2)
    chain_checkpoint(tenant=tenant)
    settings.LEDGER_ANCHOR_KEY = "A" * 43  # another 32-byte key, base64

    report = event_chain_verify(tenant=tenant)

    assert report.code == "checkpoint_invalid"
    assert "signed by key" in report.reason


def test_checkpoints_never_go_backwards(tenant):
    events = append_n(tenant, 3)

    assert checkpoint_append(tenant_id=tenant.pk, seq=events[-1].seq, digest=events[-1].hash)
    assert checkpoint_append(tenant_id=tenant.pk, seq=events[0].seq, digest=events[0].hash) is None
    assert [c.seq for c in checkpoints_read(tenant_id=tenant.pk).checkpoints] == [events[-1].seq]


def test_the_key_is_generated_once_and_kept_private(tmp_path, settings):
    settings.LEDGER_ANCHOR_KEY = ""
    settings.LEDGER_ANCHOR_KEY_FILE = tmp_path / "ledger_anchor_key"

    first = anchors.anchor_key_id()
    assert anchors.anchor_key_id() == first
    assert settings.LEDGER_ANCHOR_KEY_FILE.stat().st_mode & 0o777 == 0o600


# --- Where it is reported ------------------------------------------------------------------------


def test_verify_ledger_names_the_truncation_and_exits_non_zero(tenant):
    events = append_n(tenant, 3)
    call_command("verify_ledger", "--checkpoint", stdout=StringIO())
    delete_events(tenant, from_seq=events[-1].seq)
    out = StringIO()

    with pytest.raises(CommandError) as raised:
        call_command("verify_ledger", stdout=out)

    assert raised.value.returncode == 1
    assert f"acme: BROKEN at seq {events[-1].seq} [ledger_truncated]" in out.getvalue()


def test_verify_ledger_names_a_tenant_gone_from_the_database(tenant):
    events = append_n(tenant, 1)
    gone = tenant.pk + 10_000
    checkpoint_append(tenant_id=gone, seq=events[0].seq, digest=events[0].hash)
    out = StringIO()

    with pytest.raises(CommandError):
        call_command("verify_ledger", stdout=out)

    assert f"tenant #{gone}: BROKEN [tenant_missing]" in out.getvalue()


def test_the_verify_endpoint_names_a_rehashed_tail(tenant, api_as):
    reviewer = api_as(tenant, role=Role.REVIEWER)
    events = append_n(tenant, 4)
    chain_checkpoint(tenant=tenant)
    rewrite_tail(tenant, from_seq=events[1].seq, payload={"text": "forged"})

    body = reviewer.get("/api/v1/events/verify/").json()

    assert body["ok"] is False
    assert body["code"] == "checkpoint_mismatch"
    assert body["first_broken_seq"] == events[-1].seq
    assert body["checkpoint_seq"] == events[-1].seq


def test_the_verify_endpoint_reports_the_checkpoint_it_held_the_chain_against(tenant, api_as):
    reviewer = api_as(tenant, role=Role.REVIEWER)
    events = append_n(tenant, 2)
    chain_checkpoint(tenant=tenant)

    body = reviewer.get("/api/v1/events/verify/").json()

    assert body["ok"] is True
    assert body["code"] == ""
    assert (body["head_seq"], body["head_hash"]) == (events[-1].seq, events[-1].hash)
    assert body["checkpoint_seq"] == events[-1].seq


def test_the_checkpoint_job_signs_every_chain_and_is_safe_to_run_twice(tenant, other_tenant):
    from ledger.tasks import chains_checkpoint_task

    append_n(tenant, 2)
    append_n(other_tenant, 1)

    chains_checkpoint_task.apply()
    chains_checkpoint_task.apply()

    assert [c.seq for c in checkpoints_read(tenant_id=tenant.pk).checkpoints] == [3]
    assert [c.seq for c in checkpoints_read(tenant_id=other_tenant.pk).checkpoints] == [2]
    assert list(JobRun.objects.values_list("status", flat=True)) == ["succeeded", "succeeded"]


def test_the_checkpoint_job_fails_on_truncation_without_naming_the_tenant(tenant, other_tenant):
    from ledger.tasks import chains_checkpoint_task

    events = append_n(other_tenant, 3)
    chains_checkpoint_task.apply()
    delete_events(other_tenant, from_seq=events[-1].seq)

    chains_checkpoint_task.apply()

    run = JobRun.objects.filter(job="ledger.checkpoint").latest("started_at")
    assert run.status == "failed"
    assert run.error == "1 hash chain(s) broken"
    assert [(b["tenant_id"], b["code"]) for b in run.details["broken"]] == [
        (other_tenant.pk, "ledger_truncated")
    ]


def test_the_ledger_page_shows_the_checkpoint_and_a_break_it_found(tenant, client_as):
    from ledger.tasks import chains_checkpoint_task

    events = append_n(tenant, 2)
    chains_checkpoint_task.apply()
    page = client_as(tenant, Role.REVIEWER).get("/ledger/").content.decode()
    assert f"event #{events[-1].seq} was signed into a checkpoint" in page

    delete_events(tenant, from_seq=events[-1].seq)
    chains_checkpoint_task.apply()
    page = client_as(tenant, Role.REVIEWER).get("/ledger/").content.decode()

    assert "chain-status--broken" in page
    assert f"event #{events[-1].seq} was removed" in page


def test_a_checkpoint_being_appended_is_never_read_as_a_torn_line(tenant):
    # A verifier reading while a worker appends must wait for the whole line: half a line would
    # read as "not a checkpoint", a false alarm of tampering (seen under load in bench/cluster.py).
    import fcntl
    import os
    import threading

    append_n(tenant, 2)
    head = chain_checkpoint(tenant=tenant).head_seq
    line = anchor_file(tenant).read_bytes()
    anchor_file(tenant).write_bytes(b"")
    read: list = []

    fd = os.open(anchor_file(tenant), os.O_WRONLY | os.O_APPEND)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line[:20])
        reader = threading.Thread(target=lambda: read.append(checkpoints_read(tenant_id=tenant.pk)))
        reader.start()
        reader.join(timeout=0.3)
        assert reader.is_alive(), "the reader did not wait for the writer's lock"
        os.write(fd, line[20:])
    finally:
        os.close(fd)
    reader.join(timeout=5)

    assert not read[0].problem
    assert [c.seq for c in read[0].checkpoints] == [head]
