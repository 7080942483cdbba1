"""The local PostgreSQL the database mirror's tests use (connector/local/postgres.py): a server of its own in a
temporary directory, with logical decoding on (what Debezium's pgoutput needs), owned by the `postgres` OS user when
the suite runs as root, and gone without a trace once stopped."""
from __future__ import annotations

import os
import pwd

import psycopg
import pytest

from connector.local.postgres import OS_USER, LocalPostgres

pytestmark = pytest.mark.integration


def test_a_local_postgres_decodes_logically_and_leaves_nothing_behind():
    server = LocalPostgres(database="shop").start()
    root = server.root
    try:
        with psycopg.connect(server.dsn) as connection:
            assert connection.execute("SHOW wal_level").fetchone() == ("logical",)
            assert connection.execute("SELECT current_database()").fetchone() == ("shop",)
            slot = connection.execute("SELECT lsn FROM pg_create_logical_replication_slot('probe', 'pgoutput')")
            assert slot.fetchone()[0]
            connection.execute("SELECT pg_drop_replication_slot('probe')")
        owner = pwd.getpwuid(os.stat(server.data_dir).st_uid).pw_name
        assert owner == (OS_USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name)
    finally:
        server.stop()
    assert not root.exists(), sorted(p.name for p in root.iterdir())
    server.stop()  # a second stop is a no-op
