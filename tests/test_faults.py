"""Faults: a worker that raises, dies or hangs turns into a clear error; nothing is left behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from torchfrag.graph import capture
from torchfrag.runtime import run
from torchfrag.runtime.launcher import WorkerDied, WorkerError, WorkerTimeout

from _policy_helpers import CFG, FaultyFactory, wait_no_children


def _run(policy, fault, timeout=30.0, **kw):
    f = FaultyFactory("CartPole-v1", CFG, fault=fault, **kw)
    loop = f()
    policy = {**policy, "timeout": timeout}
    return loop, (lambda: run(capture(loop), policy, iterations=4, factory=f))


@pytest.mark.parametrize("policy", [{"name": "actors", "actors": 2},
                                    {"name": "central_inference", "env_workers": 2}])
def test_worker_raises(policy):
    _, go = _run(policy, "raise")
    t = time.monotonic()
    with pytest.raises(WorkerError, match="injected fault in the rollout|raised") as info:
        go()
    assert "injected fault" in str(info.value)
    assert time.monotonic() - t < 60
    assert wait_no_children() == []


def test_worker_sigkilled():
    _, go = _run({"name": "actors", "actors": 2}, "kill")
    t = time.monotonic()
    with pytest.raises(WorkerDied, match="worker1 .*SIGKILL"):
        go()
    assert time.monotonic() - t < 60
    assert wait_no_children() == []


def test_worker_hangs_times_out():
    _, go = _run({"name": "actors", "actors": 2}, "hang", timeout=4.0)
    t = time.monotonic()
    with pytest.raises(WorkerTimeout, match="did not answer within 4.0s"):
        go()
    assert time.monotonic() - t < 4.0 + 40
    assert wait_no_children() == []


def test_continue_with_remaining_actors(caplog):
    loop, go = _run({"name": "actors", "actors": 2, "on_failure": "continue"}, "raise")
    res = go()
    assert res.iterations == 4 and res.extra["failed"] == ["worker1"]
    assert "continuing with 1 actor" in caplog.text
    assert wait_no_children() == []


def test_ctrl_c_stops_every_process(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchfrag.train", "policy=actors", "policy.actors=2", "progress=false",
         "eval_episodes=0", "plot=false", "logger=none", f"hydra.run.dir={tmp_path}"],
        cwd=root, env={**os.environ, "PYTHONPATH": root}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
        # As in a terminal's foreground job: a test run started in the background of a
        # non-interactive shell (as CI may be) ignores SIGINT, and children inherit that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    import psutil

    ps = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(ps.children(recursive=True)) < 2:
        time.sleep(0.5)
    time.sleep(8)  # let RPC come up and the first iteration start
    kids = ps.children(recursive=True)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: SIGINT to the foreground group
    try:
        out, _ = proc.communicate(timeout=60)  # drains the output: a full pipe must not block it
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail("the driver did not exit within 60s of Ctrl-C; its output ends with:\n"
                    + out.decode(errors="replace")[-3000:])
    gone, alive = psutil.wait_procs(kids, timeout=20)
    assert alive == [], alive
