"""The CPUs a process may use: its affinity, capped by its cgroup's CPU quota."""

from __future__ import annotations

import torch

from attnlab import device


def test_cpu_threads_is_the_affinity_without_a_quota(monkeypatch):
    monkeypatch.setattr(device.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    monkeypatch.setattr(device, "_cgroup_quota", lambda: None)
    assert device.cpu_threads() == 4


def test_cpu_threads_rounds_a_fractional_quota_up_and_never_passes_the_affinity(monkeypatch):
    monkeypatch.setattr(device.os, "sched_getaffinity", lambda _pid: {0, 1})
    for quota, threads in [(0.38, 1), (0.76, 1), (1.2, 2), (16.0, 2)]:
        monkeypatch.setattr(device, "_cgroup_quota", lambda q=quota: q)
        assert device.cpu_threads() == threads


def test_set_threads_default_takes_no_more_threads_than_the_quota(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(device, "cpu_threads", lambda: 1)
    try:
        torch.set_num_threads(2)
        device.set_threads(0)
        assert torch.get_num_threads() == 1
        device.set_threads(3)  # an explicit count is the user's
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_cgroup_quota_is_none_or_positive():
    quota = device._cgroup_quota()
    assert quota is None or quota > 0
