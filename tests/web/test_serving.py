"""`attnlab serve`'s process settings: model threads split the cores, the read deadlines ride on a subclass."""

from __future__ import annotations

import pytest
import torch

from attnlab.web import serving
from attnlab.web.guards import Limits
from attnlab.web.serving import DeadlineH11Protocol, deadline_protocol, model_threads


def test_model_threads_split_the_cores_between_workers(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(serving, "cpu_threads", lambda: 8)  # the CPUs this process may use
    try:
        assert model_threads(2) == 4 == torch.get_num_threads()
        assert model_threads(3) == 2
        assert model_threads(16) == 1  # never 0
        assert model_threads(2, threads=3) == 3 == torch.get_num_threads()  # --threads wins
    finally:
        torch.set_num_threads(before)


def test_deadline_protocol_carries_its_deadlines_without_changing_the_base():
    proto = deadline_protocol(1.5, 2.5)
    assert issubclass(proto, DeadlineH11Protocol)
    assert (proto.header_timeout, proto.body_timeout) == (1.5, 2.5)
    assert (DeadlineH11Protocol.header_timeout, DeadlineH11Protocol.body_timeout) == (
        Limits.header_timeout_s,
        Limits.body_timeout_s,
    )


# ----------------------------------------------------------------- the request-head limit, however it arrives


def _head(size: int) -> bytes:
    """A GET /health head of about ``size`` bytes (one long header)."""
    base = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Pad: \r\n\r\n"
    return base.replace(b"X-Pad: ", b"X-Pad: " + b"a" * max(0, size - len(base)))


def test_a_complete_head_over_the_limit_is_refused_even_in_one_read():
    """h11 counts its limit only while a head is incomplete: a whole 60 KB head in one read passed."""
    import h11

    from attnlab.web.serving import HeadLimitConnection, head_bytes

    plain = h11.Connection(h11.SERVER, max_incomplete_event_size=16_384)
    plain.receive_data(_head(60_000))
    assert isinstance(plain.next_event(), h11.Request)  # the defect, in h11 alone
    conn = HeadLimitConnection(16_384)
    conn.receive_data(_head(60_000))
    with pytest.raises(h11.RemoteProtocolError) as e:
        conn.next_event()
    assert e.value.error_status_hint == 431 and conn.too_large
    fits = HeadLimitConnection(16_384)
    fits.receive_data(_head(16_000))
    event = fits.next_event()
    assert isinstance(event, h11.Request) and not fits.too_large
    assert head_bytes(event) == len(_head(16_000))  # counted as sent


@pytest.mark.parametrize("chunk", [None, 4096], ids=["one-write", "4k-writes"])
def test_a_live_server_answers_431_to_a_60_kb_head(chunk):
    import socket

    from attnlab.web.app import create_app
    from attnlab.web.registry import LoadedRun
    from tests.web.test_hardening import _closed_within, _Gated, _running

    limits = Limits()
    run = LoadedRun("fake", _Gated(), None, {"model_kind": "bahdanau", "kinds": ["cross"]})
    head = _head(60_000)
    with _running(create_app({"fake": run}, limits), limits) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            try:
                for i in range(0, len(head), chunk or len(head)):
                    s.sendall(head[i : i + (chunk or len(head))])
            except OSError:
                pass  # the server may close before the rest is sent
            closed, got = _closed_within(s, 5.0)
        assert closed and got.startswith(b"HTTP/1.1 431"), got[:200]
        assert b"over 16384 bytes" in got
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(_head(8_000))
            _, got = _closed_within(s, 5.0)
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
