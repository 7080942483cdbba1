"""A real PostgreSQL server on 127.0.0.1, from Debian's `postgresql` package, for the database mirror's demo and tests.

`LocalPostgres` makes a cluster with `initdb` in a temporary directory of its own, starts it with `pg_ctl` on a free
port with `wal_level=logical` (what Debezium's PostgreSQL connector reads through the `pgoutput` plugin), and stops
and removes it cleanly. PostgreSQL refuses to run as root: under root the cluster belongs to the `postgres` OS user
(which the package creates) and every server command runs as that user. `sql()` runs a statement through `psql` (the
server's own few queries need no Python driver; the demo's workload and the mirror comparison read and write with
psycopg, connector/app/mirror_check.py).
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from connector.errors import SetupError
from connector.local.ports import HOST, free_port

PACKAGE_HINT = "install Debian's `postgresql` package (`apt-get install postgresql`, which `make setup` runs)"
DEBIAN_ROOT = Path("/usr/lib/postgresql")
"""Where Debian's packages put each major version's programs (`<major>/bin`), off PATH."""
OS_USER = "postgres"
"""The OS user that owns the cluster when lakesink runs as root (PostgreSQL refuses root)."""

SERVER_SETTINGS = {
    "listen_addresses": HOST,
    "wal_level": "logical",
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    # a throw-away cluster: nothing to recover after a crash of the machine, so no waiting for the disk
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "off",
    "shared_buffers": "32MB",
    "max_connections": "50",
    "timezone": "UTC",
    "log_timezone": "UTC",
}


def bin_dir() -> Path:
    """The folder of PostgreSQL's server programs: where `pg_ctl` is on PATH, else the newest
    /usr/lib/postgresql/<major>/bin (Debian installs them there, off PATH)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(DEBIAN_ROOT.glob("*/bin/pg_ctl"),
                        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    if candidates:
        return candidates[-1].parent
    raise SetupError(f"PostgreSQL's server programs (initdb, pg_ctl) were not found: {PACKAGE_HINT}.")


def _program(name: str) -> str:
    path = bin_dir() / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found:
        return found
    raise SetupError(f"PostgreSQL's `{name}` was not found beside pg_ctl in {bin_dir()}: {PACKAGE_HINT}.")


def _run_as() -> pwd.struct_passwd | None:
    """The OS user the server commands run as: None (this process's own) unless this process is root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(OS_USER)
    except KeyError:
        raise SetupError(f"PostgreSQL refuses to run as root and there is no `{OS_USER}` OS user to run it as: "
                         f"{PACKAGE_HINT} (it creates the user), or run as another user.") from None


class LocalPostgres:
    """One PostgreSQL server on a throw-away cluster. `start()` returns once it accepts connections; `stop()` ends
    it (a fast shutdown) and removes the cluster's directory."""

    def __init__(self, port: int = 0, database: str = "lakesink", startup_timeout_s: float = 60.0,
                 settings: dict[str, str] | None = None):
        """`database`: made at start, besides `postgres`. `settings`: postgresql.conf values over SERVER_SETTINGS."""
        self.port = port or free_port()
        self.database = database
        self.user = "postgres"
        """The database superuser (trust authentication on 127.0.0.1: no password)."""
        self.startup_timeout_s = startup_timeout_s
        self.settings = {**SERVER_SETTINGS, **(settings or {})}
        self.root: Path | None = None
        self._owner: pwd.struct_passwd | None = None

    @property
    def data_dir(self) -> Path:
        if self.root is None:
            raise SetupError("this LocalPostgres has not started: it has no data directory")
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "postgres.log" if self.root else Path("postgres.log")

    @property
    def dsn(self) -> str:
        """A libpq connection string to the database (psycopg and psql take it)."""
        return f"host={HOST} port={self.port} user={self.user} dbname={self.database}"

    def connection_settings(self) -> dict[str, str]:
        """The connection keys of Debezium's PostgreSQL connector for this server."""
        return {"database.hostname": HOST, "database.port": str(self.port), "database.user": self.user,
                "database.password": "", "database.dbname": self.database}

    def _command(self, args: list[str], timeout_s: float = 60.0, check: bool = True) -> subprocess.CompletedProcess:
        owner = self._owner
        env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
        if owner is not None:
            env.update(HOME=owner.pw_dir, USER=owner.pw_name, LOGNAME=owner.pw_name)
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, env=env,
                                  cwd=self.root, stdin=subprocess.DEVNULL,
                                  user=owner.pw_uid if owner else None, group=owner.pw_gid if owner else None,
                                  extra_groups=[] if owner else None)
        except subprocess.TimeoutExpired:
            raise SetupError(f"`{' '.join(args[:2])}` did not finish within {timeout_s:g} s: "
                             f"see {self.log_file}") from None
        if check and proc.returncode != 0:
            said = " / ".join(line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip())
            raise SetupError(f"`{Path(args[0]).name} {args[1] if len(args) > 1 else ''}` failed "
                             f"(exit {proc.returncode}): {said[-600:]}")
        return proc

    def start(self) -> "LocalPostgres":
        """Make the cluster (once) and start the server; a failure leaves no directory and no server behind, and
        its error carries the end of the server's log."""
        for program in ("initdb", "pg_ctl", "psql"):
            _program(program)
        try:
            self._start()
        except SetupError as error:
            log = self.log_file if self.root is not None else None
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log and log.exists() else []
            self.stop()
            raise SetupError(f"{error}{' (the server logged: ' + ' / '.join(tail) + ')' if tail else ''}") from None
        return self

    def _start(self) -> None:
        if self.root is None:
            self._owner = _run_as()
            self.root = Path(tempfile.mkdtemp(prefix="lakesink-postgres-"))
            if self._owner is not None:
                os.chown(self.root, self._owner.pw_uid, self._owner.pw_gid)
            self._command([_program("initdb"), "-D", str(self.data_dir), "-U", self.user, "--auth=trust",
                           "-E", "UTF8", "--locale=C", "--no-sync"])
            with open(self.data_dir / "postgresql.conf", "a") as conf:
                conf.write("\n# lakesink's local server\n")
                conf.write(f"port = {self.port}\n")
                conf.write(f"unix_socket_directories = '{self.root}'\n")
                for key, value in self.settings.items():
                    conf.write(f"{key} = '{value}'\n")
        self._command([_program("pg_ctl"), "start", "-D", str(self.data_dir), "-l", str(self.log_file), "-w",
                       "-t", str(int(self.startup_timeout_s))], timeout_s=self.startup_timeout_s + 10)
        if self.database not in self.sql("SELECT datname FROM pg_database", database="postgres").split():
            self.sql(f'CREATE DATABASE "{self.database}"', database="postgres")

    def sql(self, statement: str, database: str | None = None) -> str:
        """Run SQL with `psql` as the superuser and return its rows, unaligned (`|` between columns, one per line)."""
        proc = subprocess.run([_program("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", HOST,
                               "-p", str(self.port), "-U", self.user, "-d", database or self.database,
                               "-c", statement],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                              env={**os.environ, "PGCONNECT_TIMEOUT": "10"})
        if proc.returncode != 0:
            said = " / ".join(line.strip() for line in proc.stderr.splitlines() if line.strip())
            raise SetupError(f"psql on {HOST}:{self.port} failed: {said[-600:]}")
        return proc.stdout.strip()

    def running(self) -> bool:
        if self.root is None or not self.data_dir.exists():
            return False
        return self._command([_program("pg_ctl"), "status", "-D", str(self.data_dir)], check=False).returncode == 0

    def wait_slot_inactive(self, slot: str, timeout_s: float = 60.0) -> None:
        """Return once the replication slot `slot` has no walsender attached (or does not exist): a Connect worker
        killed without stopping leaves its walsender attached until PostgreSQL notices, and a new worker's Debezium
        cannot take the slot before then."""
        deadline = time.monotonic() + timeout_s
        while True:
            active = self.sql(f"SELECT active_pid FROM pg_replication_slots WHERE slot_name = '{slot}' AND active")
            if not active:
                return
            if time.monotonic() > deadline:
                raise SetupError(f"the replication slot {slot} on {HOST}:{self.port} is still held by walsender "
                                 f"{active} after {timeout_s:g} s")
            time.sleep(0.2)

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.root is None:
            return
        if self.running():
            self._command([_program("pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "fast", "-w",
                           "-t", str(int(timeout_s))], timeout_s=timeout_s + 10, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> "LocalPostgres":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
