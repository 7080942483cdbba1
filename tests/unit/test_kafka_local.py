"""The local broker's cluster ids: never one that a command line would read as an option."""
from __future__ import annotations

import base64
import uuid

from connector.local.kafka import new_cluster_id


def test_cluster_ids_never_start_with_a_dash_and_decode_to_16_bytes():
    ids = [new_cluster_id() for _ in range(20_000)]
    assert all(not i.startswith("-") for i in ids)
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_draw_that_starts_with_a_dash_is_drawn_again(monkeypatch):
    # 0xf8 as first byte encodes to '-' in URL-safe base64: the generator must skip it and take the next draw
    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=bytes(16)), uuid.UUID(int=1),
                  uuid.UUID(bytes=b"\x10" * 16)])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    assert new_cluster_id() == base64.urlsafe_b64encode(b"\x10" * 16).decode().rstrip("=")
