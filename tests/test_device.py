"""The CPUs a process may use: its affinity, capped by its cgroup's CPU quota."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
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
    another program held most of a core, so one is free. With 0.2 of a core busy elsewhere, both are.
    Niced time counts only as far as the niced programs compete (another session's group)."""

    def sample(busy_after: list[int], niced_after: int = 0, competes: float = 1.0):
        reads = iter([[(0, 0, 0), (0, 0, 0)], [(b, niced_after // 2, 100) for b in busy_after]])
        clock = iter([0.0, 1.0, 1.0])
        monkeypatch.setattr(device, "cpu_threads", lambda: 2)
        monkeypatch.setattr(device.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
        monkeypatch.setattr(device, "_cpu_jiffies", lambda cores: next(reads))
        monkeypatch.setattr(device, "_niced_share_that_competes", lambda: competes)
        monkeypatch.setattr(device, "_own_nice", lambda: 0)
        monkeypatch.setattr(device.time, "perf_counter", lambda: next(clock))
        own = iter([0.0, 1.0])
        monkeypatch.setattr(device.time, "process_time", lambda: next(own))
        return device.idle_sampler(0.5)()

    assert sample([100, 90]) == 1
    assert sample([100, 20]) == 2
    assert sample([100, 100]) == 1  # never fewer than one
    assert sample([100, 100], niced_after=100, competes=0.0) == 2  # a nice-19 loop of this session yields
    assert sample([100, 100], niced_after=100, competes=1.0) == 1  # another session's takes its core


def _session_group() -> tuple[str, int] | None:
    try:
        on = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return None
    return device._autogroup("self") if on else None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
@pytest.mark.parametrize("groups", ["as found", "none"])
def test_a_niced_program_competes_only_from_another_session_group(monkeypatch, groups):
    """Two real busy loops at nice 19: one in this process's session group yields to it; one started in a
    new session (its own group, at nice 0) takes a core all the same. With no session group (autogroup
    off, or a container's cgroup, where ``/proc/PID/autogroup`` reads empty) nice values order every
    program, and the first loop yields."""
    if groups == "none":
        monkeypatch.setattr(device, "_autogroup", lambda pid: None)
    mine = _session_group() if groups == "as found" else None
    if device._own_nice() > 19 - device._YIELD_NICE or (mine or ("", 0))[1] > 0:
        pytest.skip("this test runs niced: a nice-19 program would not be nicer than it")
    if any(_running_niced(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()):
        pytest.skip("other niced programs are running: the share would be theirs too")
    loop = [sys.executable, "-c", "while True: pass"]
    for new_session, competes in [(False, 0.0), (True, 1.0)]:
        if competes and mine is None:
            continue  # without session groups a nice value orders every program
        proc = subprocess.Popen(["nice", "-n", "19", *loop], start_new_session=new_session)
        try:
            deadline = time.monotonic() + 20
            while not _running_niced(proc.pid):
                assert time.monotonic() < deadline, "the busy loop never ran"
                time.sleep(0.02)
            assert device._niced_share_that_competes(max_age_s=0) == competes
        finally:
            proc.kill()
            proc.wait()


def _running_niced(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] == "R" and int(fields[16]) > 0
