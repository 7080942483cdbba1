"""connector/storage/checks.py against the real local S3 server: each failure is one line naming the check and
the fix, an unreachable store fails within seconds, the probe never stays behind, and `lakesink validate` prints
the same line."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from connector.errors import SetupError
from connector.local.s3 import ACCESS_KEY, SECRET_KEY
from connector.storage.checks import check_store
from connector.storage.store import Location, S3Settings, Store
from testkit.s3proxy import S3Proxy

pytestmark = pytest.mark.integration
BOUND_S = 15.0
"""What the brief of the checks promises for a store that cannot be reached."""


def _store(endpoint: str, bucket: str = "lakesink", secret: str = SECRET_KEY, key: str = ACCESS_KEY) -> Store:
    return Store(Location.parse(f"s3://{bucket}/checks/{uuid.uuid4().hex}/events"),
                 S3Settings(endpoint, None, True, key, secret))


def _failure(store: Store, **kwargs) -> str:
    with pytest.raises(SetupError) as failed:
        check_store(store, "c1", **kwargs)
    message = str(failed.value)
    assert "\n" not in message, message
    return message


def _left_behind(s3_server, store: Store) -> list[str]:
    listed = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=f"{store.root.key}/")
    return [o["Key"] for o in listed.get("Contents", [])]


def test_a_good_store_passes_and_keeps_no_probe(s3_server):
    store = _store(s3_server.endpoint)
    check_store(store, "c1")
    assert _left_behind(s3_server, store) == []


def test_a_wrong_secret_names_the_secret_setting_and_never_shows_it(s3_server):
    message = _failure(_store(s3_server.endpoint, secret="not-the-secret-1234"))
    assert message == (f"storage s3://lakesink/{message.split('s3://lakesink/')[1].split(':')[0]}: credentials "
                       f"rejected by {s3_server.endpoint}: aws.secret.access.key is not the secret of "
                       f"aws.access.key.id=lakesink: fix aws.secret.access.key")
    assert "not-the-secret-1234" not in message


def test_an_unknown_access_key_names_the_key_setting(s3_server):
    message = _failure(_store(s3_server.endpoint, key="nobody-knows-me", secret="x"))
    assert f"credentials rejected by {s3_server.endpoint}: it knows no aws.access.key.id=nobody-knows-me: fix " \
           f"aws.access.key.id" in message


def test_a_missing_bucket_says_create_it(s3_server):
    bucket = f"missing-{uuid.uuid4().hex[:8]}"
    message = _failure(_store(s3_server.endpoint, bucket=bucket))
    assert f"bucket {bucket} does not exist at {s3_server.endpoint}: create it" in message


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_endpoint_fails_at_once(report):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    message = _failure(_store(endpoint))
    took = time.monotonic() - started
    assert f"cannot reach {endpoint} (connection refused): check s3.endpoint" in message
    assert took < BOUND_S, took
    report(f"storage check, endpoint refusing connections: failed in {took:.2f} s")


def test_an_endpoint_that_accepts_but_never_answers_fails_within_the_bound(report):
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel completes connections; nobody answers
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        message = _failure(_store(endpoint))
        took = time.monotonic() - started
    assert f"{endpoint} did not answer within 3 s ('bucket answers')" in message
    assert took < BOUND_S, took
    report(f"storage check, endpoint that never answers: failed in {took:.2f} s")


def test_a_store_that_ignores_conditional_writes_is_refused_and_the_probe_removed(s3_server):
    with S3Proxy(s3_server.endpoint, strip_conditional=True, access_key=ACCESS_KEY, secret_key=SECRET_KEY) as proxy:
        store = _store(proxy.endpoint)
        message = _failure(store)
        check_store(store, "c1", conditional=False)  # the other two checks pass through the same proxy
    assert f"{proxy.endpoint} ignores If-None-Match: * (conditional writes): it overwrote an existing object, so " \
           f"two coordinators could overwrite each other's commits and lakesink does not write there; use a store " \
           f"that supports conditional writes" in message
    assert proxy.counters.conditionals_stripped == 2
    assert _left_behind(s3_server, store) == []


def test_a_local_table_needs_only_a_writable_directory(tmp_path):
    check_store(Store(Location.parse(str(tmp_path / "not" / "yet" / "events"))), "c1")
    assert list(tmp_path.iterdir()) == []  # the probe file is gone, and nothing was created
    (tmp_path / "a-file").write_text("x")
    message = _failure(Store(Location.parse(str(tmp_path / "a-file" / "events"))))
    assert message == f"table {tmp_path / 'a-file' / 'events'}: {tmp_path / 'a-file'} is a file, not a directory: " \
                      f"choose another target.base.path"


def test_an_unwritable_local_directory_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    table = locked / "events"
    try:
        if os.geteuid() == 0:  # root writes anywhere: check without the capability that lets it
            probe = subprocess.run(
                ["setpriv", "--inh-caps=-dac_override", "--bounding-set=-dac_override", sys.executable, "-c",
                 "import sys\nfrom connector.errors import SetupError\n"
                 "from connector.storage.checks import check_store\n"
                 "from connector.storage.store import Location, Store\n"
                 "try:\n    check_store(Store(Location.parse(sys.argv[1])), 'c1')\nexcept SetupError as e:\n"
                 "    print(e)\n    sys.exit(3)\n", str(table)],
                capture_output=True, text=True, timeout=60)
            assert probe.returncode == 3, probe.stdout + probe.stderr
            message = probe.stdout.strip()
        else:
            message = _failure(Store(Location.parse(str(table))))
    finally:
        locked.chmod(0o755)
    assert message == f"table {table}: cannot write in {locked} (Permission denied): give the user lakesink " \
                      f"runs write access there, or choose another target.base.path"


def _properties(tmp_path: Path, endpoint: str, base: str, secret: str = SECRET_KEY) -> Path:
    path = tmp_path / "s3.properties"
    path.write_text(f"name=c1\nkafka.bootstrap.servers=127.0.0.1:9\nkafka.topic.names=t\n"
                    f"target.base.path={base}\ntarget.table.name=events\ns3.endpoint={endpoint}\n"
                    f"s3.path.style.access.enabled=true\naws.access.key.id={ACCESS_KEY}\n"
                    f"aws.secret.access.key={secret}\n")
    return path


def test_validate_prints_the_checks_of_an_s3_target_and_reads_its_table(s3_server, tmp_path, capsys):
    from connector.app.cli import main

    base = f"s3://lakesink/validate/{uuid.uuid4().hex}"
    config = _properties(tmp_path, s3_server.endpoint, base)
    assert main(["validate", "--config", str(config)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        f"storage {base}/events: bucket answers, credentials can write, conditional writes honoured",
        f"table {base}/events: does not exist yet; the first commit creates it"]

    import deltalake
    import pyarrow as pa

    from connector.schema.columns import META_FIELDS

    # a table with the _kafka_* columns connect.meta.data=true writes (validate refuses one without them)
    columns = {"id": pa.array([1, 2]), **{f.name: pa.nulls(2, f.type) for f in META_FIELDS}}
    deltalake.write_deltalake(f"{base}/events", pa.table(columns),
                              storage_options=S3Settings(s3_server.endpoint, None, True, ACCESS_KEY,
                                                         SECRET_KEY).delta_options())
    assert main(["validate", "--config", str(config)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        f"table {base}/events: supported, written by the fast path (files added as written)"


def test_validate_of_an_s3_target_with_a_wrong_secret_exits_2_with_one_line(s3_server, tmp_path, capsys):
    from connector.app.cli import main

    base = f"s3://lakesink/validate/{uuid.uuid4().hex}"
    config = _properties(tmp_path, s3_server.endpoint, base, secret="wrong-secret-5678")
    assert main(["validate", "--config", str(config)]) == 2
    out = capsys.readouterr().out
    assert out.splitlines()[1:] == [
        f"storage {base}/events: credentials rejected by {s3_server.endpoint}: aws.secret.access.key is not the "
        f"secret of aws.access.key.id=lakesink: fix aws.secret.access.key"]
    assert "wrong-secret-5678" not in out


def test_put_if_absent_agrees_with_the_conditional_write_check(s3_server):
    """What check 3 vouches for is what Store.put_if_absent relies on: the second put of a name loses on the real
    server, and wins (an overwrite) on the store that check 3 refuses."""
    store = _store(s3_server.endpoint)
    assert store.put_if_absent("probe/x", b"first") is True
    assert store.put_if_absent("probe/x", b"second") is False
    assert store.read_bytes("probe/x") == b"first"
    with S3Proxy(s3_server.endpoint, strip_conditional=True, access_key=ACCESS_KEY, secret_key=SECRET_KEY) as proxy:
        faulty = Store(store.root, S3Settings(proxy.endpoint, None, True, ACCESS_KEY, SECRET_KEY))
        assert faulty.put_if_absent("probe/x", b"second") is True
    assert store.read_bytes("probe/x") == b"second"
