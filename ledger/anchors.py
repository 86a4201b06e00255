"""Checkpoints: each tenant's chain head, signed and kept outside the database.

The hash chain proves that stored events agree with each other, not that they are the events
that were written: anyone who can write ``ledger_event`` (the owner of the table, a superuser)
can delete the newest events or rewrite a tail and recompute its hashes, and the chain verifies
again. A checkpoint pins the head as it was: ``(tenant, seq, hash)``, signed with an Ed25519 key
and appended to ``<LEDGER_ANCHOR_DIR>/tenant-<id>.jsonl``, a file the database's roles cannot
write (they have no way to the file system; the embedded server even runs as another OS user when
we are root). Verification then names:

- ``ledger_truncated``: the chain ends below a checkpointed seq (events were removed);
- ``checkpoint_mismatch``: the event at a checkpointed seq has another hash (history up to it
  was rewritten, hashes recomputed or not);
- ``checkpoint_invalid``: a line of the file is not signed by this service's key.

Checkpoints are made by the ``ledger.checkpoint`` job every few minutes (``chain_checkpoint``:
it verifies only what was appended since the last one, so a tampered tail is never signed), after
every complete verification, and on demand with ``verify_ledger --checkpoint``. docs/ledger.md
has the threat model and the trade-offs of the store.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import IO, TYPE_CHECKING

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings
from django.utils import timezone

from ledger.chain import canonical_json

if TYPE_CHECKING:
    from ledger.models import Tenant
    from ledger.selectors import ChainReport

ANCHOR_FORMAT_VERSION = 1
_FILE_PATTERN = "tenant-{}.jsonl"
# A line is about 330 bytes; the newest one is within this many of the end.
_LAST_LINE_MAX_BYTES = 4096


class AnchorKeyError(RuntimeError):
    """LEDGER_ANCHOR_KEY (or its file) holds no usable Ed25519 key."""


@dataclass(frozen=True)
class Checkpoint:
    tenant_id: int
    seq: int
    hash: str
    signed_at: datetime


@dataclass(frozen=True)
class CheckpointLog:
    """A tenant's checkpoints in the order they were signed, or why the file cannot be trusted."""

    checkpoints: list[Checkpoint] = field(default_factory=list)
    problem: str = ""

    @property
    def latest(self) -> Checkpoint | None:
        return self.checkpoints[-1] if self.checkpoints else None


# --- The key -----------------------------------------------------------------------------------


@cache
def _key_for(configured: str, path: str) -> Ed25519PrivateKey:
    raw = _b64decode(configured) if configured else _key_file_read(Path(path))
    if len(raw) != 32:
        raise AnchorKeyError(
            "LEDGER_ANCHOR_KEY must be 32 bytes (an Ed25519 private key), base64-encoded."
        )
    return Ed25519PrivateKey.from_private_bytes(raw)


def _key_file_read(path: Path) -> bytes:
    """The key file's bytes, made on first use (mode 0600, like the generated SECRET_KEY)."""
    with contextlib.suppress(FileNotFoundError):
        return _b64decode(path.read_text().strip())
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = os.urandom(32)
    try:
        # O_EXCL: processes starting together all end up with the first one's key.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _b64decode(path.read_text().strip())
    with os.fdopen(fd, "w") as handle:
        handle.write(base64.urlsafe_b64encode(raw).decode() + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return raw


def anchor_key() -> Ed25519PrivateKey:
    """The signing key: ``LEDGER_ANCHOR_KEY``, else the file ``LEDGER_ANCHOR_KEY_FILE``."""
    return _key_for(settings.LEDGER_ANCHOR_KEY, str(settings.LEDGER_ANCHOR_KEY_FILE))


def anchor_public_key() -> Ed25519PublicKey:
    return anchor_key().public_key()


def anchor_key_id() -> str:
    """Names the key in every line, so a line signed by another key is told apart at once."""
    raw = anchor_public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def _b64decode(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as exc:
        raise AnchorKeyError("The ledger anchor key is not base64.") from exc


# --- The store -----------------------------------------------------------------------------------


def _path(tenant_id: int) -> Path:
    return Path(settings.LEDGER_ANCHOR_DIR) / _FILE_PATTERN.format(int(tenant_id))


def _signed_document(tenant_id: int, seq: int, digest: str, signed_at: str, key: str) -> bytes:
    document = {
        "v": ANCHOR_FORMAT_VERSION,
        "tenant": tenant_id,
        "seq": seq,
        "hash": digest,
        "signed_at": signed_at,
        "key": key,
    }
    return canonical_json(document).encode()


def _line_read(text: str, tenant_id: int, key_id: str) -> Checkpoint | str:
    """The checkpoint of one line, or why it cannot be trusted."""
    try:
        line = json.loads(text)
        document = _signed_document(
            int(line["tenant"]), int(line["seq"]), str(line["hash"]), line["signed_at"], line["key"]
        )
        signature = _b64decode(str(line["sig"]))
        signed_at = datetime.fromisoformat(str(line["signed_at"]))
    except (ValueError, KeyError, TypeError, AnchorKeyError):
        return "it is not a checkpoint"
    if line["v"] != ANCHOR_FORMAT_VERSION or line["tenant"] != tenant_id:
        return "it is not a checkpoint of this tenant"
    if line["key"] != key_id:
        return f"it was signed by key {line['key']}, not by this service's key {key_id}"
    try:
        anchor_public_key().verify(signature, document)
    except InvalidSignature:
        return "its signature does not verify"
    return Checkpoint(tenant_id=tenant_id, seq=line["seq"], hash=line["hash"], signed_at=signed_at)


def _log_read(handle: IO[str], tenant_id: int) -> CheckpointLog:
    key_id = anchor_key_id()
    checkpoints: list[Checkpoint] = []
    for number, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        read = _line_read(text, tenant_id, key_id)
        if isinstance(read, str):
            return CheckpointLog(checkpoints, f"line {number} of {_path(tenant_id)}: {read}")
        if checkpoints and read.seq <= checkpoints[-1].seq:
            return CheckpointLog(
                checkpoints,
                f"line {number} of {_path(tenant_id)}: seq {read.seq} does not follow "
                f"{checkpoints[-1].seq}",
            )
        checkpoints.append(read)
    return CheckpointLog(checkpoints)


def checkpoints_read(*, tenant_id: int) -> CheckpointLog:
    """Every checkpoint of the tenant, each signature checked; empty when none was made yet."""
    try:
        with open(_path(tenant_id), encoding="utf-8") as handle:
            # Shared lock: a checkpoint being appended (under the exclusive lock) is read whole
            # or not at all, never as a torn last line that would look like tampering.
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
            return _log_read(handle, tenant_id)
    except FileNotFoundError:
        return CheckpointLog()


def checkpoint_latest(*, tenant_id: int) -> Checkpoint | None:
    """The newest checkpoint alone, read from the end of the file (for pages: no full read);
    None without one or when that line does not verify (the full read says why)."""
    try:
        with open(_path(tenant_id), "rb") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - _LAST_LINE_MAX_BYTES))
            tail = handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    lines = [line for line in tail.splitlines() if line.strip()]
    if not lines:
        return None
    read = _line_read(lines[-1], tenant_id, anchor_key_id())
    return read if isinstance(read, Checkpoint) else None


def checkpoint_tenant_ids() -> list[int]:
    """The tenants that have checkpoints, whether or not the database still has them."""
    folder = Path(settings.LEDGER_ANCHOR_DIR)
    if not folder.is_dir():
        return []
    ids = []
    for path in folder.glob(_FILE_PATTERN.format("*")):
        number = path.name.removeprefix("tenant-").removesuffix(".jsonl")
        if number.isdigit():
            ids.append(int(number))
    return sorted(ids)


@contextlib.contextmanager
def _locked_for_append(tenant_id: int) -> Iterator[int]:
    """The tenant's file open for appending, under an exclusive lock (one writer at a time)."""
    folder = Path(settings.LEDGER_ANCHOR_DIR)
    # Made private when we make it; a folder the operator provided keeps its own modes.
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(_path(tenant_id), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # releases the lock


def checkpoint_append(*, tenant_id: int, seq: int, digest: str) -> Checkpoint | None:
    """Sign ``(tenant, seq, digest)`` and append it; None when it would not move the head on.

    The caller verified the chain up to ``seq``. A checkpoint never goes backwards: two runs that
    race keep the higher head.
    """
    with _locked_for_append(tenant_id) as fd:
        with open(fd, encoding="utf-8", closefd=False) as handle:
            handle.seek(0)
            latest = _log_read(handle, tenant_id).latest
        if latest is not None and latest.seq >= seq:
            return None
        signed_at = timezone.now().astimezone(UTC)
        stamp = signed_at.isoformat(timespec="microseconds")
        key = anchor_key_id()
        document = _signed_document(tenant_id, seq, digest, stamp, key)
        signature = base64.urlsafe_b64encode(anchor_key().sign(document)).decode().rstrip("=")
        line = {**json.loads(document), "sig": signature}
        os.write(fd, (canonical_json(line) + "\n").encode())
        os.fsync(fd)
    return Checkpoint(tenant_id=tenant_id, seq=seq, hash=digest, signed_at=signed_at)


# --- The service -------------------------------------------------------------------------------


def chain_checkpoint(*, tenant: Tenant, full: bool = False) -> ChainReport:
    """Verify the tenant's chain and sign its head; nothing is signed unless the check passed.

    By default only what was appended since the last checkpoint is checked (that checkpoint's
    event must still carry its hash), so the job can run every few minutes on any chain length;
    ``full`` walks the whole chain against every checkpoint first.
    """
    from ledger.selectors import event_chain_verify

    if full:
        report = event_chain_verify(tenant=tenant)
    else:
        log = checkpoints_read(tenant_id=tenant.pk)
        report = event_chain_verify(tenant=tenant, since=log)
    if report.ok and report.head_seq:
        checkpoint_append(tenant_id=tenant.pk, seq=report.head_seq, digest=report.head_hash)
    return report


@dataclass(frozen=True)
class TenantGone:
    code: str
    reason: str


def anchored_tenants_missing() -> dict[int, TenantGone]:
    """Tenants with checkpoints that the database no longer has: their whole chain went."""
    from ledger.models import Tenant

    anchored = checkpoint_tenant_ids()
    present = set(Tenant.objects.filter(pk__in=anchored).values_list("pk", flat=True))
    missing = {}
    for tenant_id in anchored:
        if tenant_id in present:
            continue
        latest = checkpoints_read(tenant_id=tenant_id).latest
        recorded = f"event #{latest.seq}" if latest else "a chain"
        missing[tenant_id] = TenantGone(
            "tenant_missing",
            f"tenant #{tenant_id} is gone from the database, but a checkpoint recorded {recorded}",
        )
    return missing
