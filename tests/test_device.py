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


def test_the_load_sample_counts_other_programs_cores(monkeypatch):
    """Two cores; over one second this process used one core's time and the cores were busy 1.0 and 0.9:
    another program held most of a core, so one is free. With 0.2 of a core busy elsewhere, both are."""
    from attnlab import device

    def sample(busy_after: list[int]):
        reads = iter([[(0, 0), (0, 0)], [(b, 100) for b in busy_after]])
        clock = iter([0.0, 1.0, 1.0])
        monkeypatch.setattr(device, "cpu_threads", lambda: 2)
        monkeypatch.setattr(device.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
        monkeypatch.setattr(device, "_cpu_jiffies", lambda cores: next(reads))
        monkeypatch.setattr(device.time, "perf_counter", lambda: next(clock))
        own = iter([0.0, 1.0])
        monkeypatch.setattr(device.time, "process_time", lambda: next(own))
        return device.idle_sampler(0.5)()

    assert sample([100, 90]) == 1
    assert sample([100, 20]) == 2
    assert sample([100, 100]) == 1  # never fewer than one
