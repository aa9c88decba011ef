"""`attnlab serve`'s process settings: model threads split the cores, the read deadlines ride on a subclass."""

from __future__ import annotations

import os

import torch

from attnlab.web.guards import Limits
from attnlab.web.serving import DeadlineH11Protocol, deadline_protocol, model_threads


def test_model_threads_split_the_cores_between_workers(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
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
