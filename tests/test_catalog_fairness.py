"""The env catalogue benchmark measures both pools under the same conditions.

``import mujoco`` installs MuJoCo's timer callback for the whole process, which
slowed only torchfrag's MuJoCo envs in the catalogue's process (envpool links
its own MuJoCo, the limit loop runs in a subprocess): building the limit loop
must locate the wheel without importing it. ``with_cores`` records how many
cores each sample got, so a sample taken while another job held a core shows.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fake_subprocess(monkeypatch, catalog, stdout: str) -> list:
    """Replaces the catalogue's ``subprocess.run`` by one that records each command and prints ``stdout``."""
    calls: list = []

    class Done:
        returncode = 0
        stderr = ""

    Done.stdout = stdout

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return Done()

    monkeypatch.setattr(catalog.subprocess, "run", fake_run)
    return calls


def test_building_the_dmc_limit_loop_does_not_import_mujoco() -> None:
    # In a fresh interpreter (this one may have imported mujoco already); the
    # compiler call is replaced, only what the function imports matters here.
    code = (
        "import subprocess, sys\n"
        "subprocess.run = lambda cmd, check: None\n"
        "from benchmarks.catalog import _build_dmc_limit\n"
        "exe = _build_dmc_limit('/tmp')\n"
        "assert exe.endswith('dmc_limit'), exe\n"
        "print('mujoco' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_with_cores_reports_the_cpu_a_sample_used() -> None:
    from benchmarks.catalog import with_cores

    def busy() -> float:
        end = time.perf_counter() + 0.2
        while time.perf_counter() < end:
            pass
        return 1.0

    def idle() -> float:
        time.sleep(0.2)
        return 2.0

    cores: list[float] = []
    assert with_cores(busy, cores)() == 1.0
    assert with_cores(idle, cores)() == 2.0
    # One busy thread: at most one core (a loaded host gives it less); a
    # sleeping one: next to none.
    assert 0.2 < cores[0] <= 1.1
    assert cores[1] < 0.1


def test_the_dmc_limit_loop_replays_as_many_control_sweeps_as_the_pools_get_action_batches(
        monkeypatch) -> None:
    # The pools cycle through ACTION_BATCHES action batches (a periodic
    # forcing that changes CartpoleSwingup's physics cost): the limit loop is
    # told to replay that many sweeps of controls, not to draw fresh ones.
    import numpy as np

    from benchmarks import catalog
    from benchmarks.envs import ACTION_BATCHES, _actions

    calls = _fake_subprocess(monkeypatch, catalog, "1000 2.5\n")
    assert catalog._dmc_limit("/x/dmc_limit", "CheetahRun-v1", 8, 2, 0.1) == (1000.0, 2.5)
    assert calls[0][1:] == ["CheetahRun-v1", "8", "2", "0.1", "sequence", str(ACTION_BATCHES)]
    assert len(_actions("CheetahRun-v1", 8, np.random.default_rng(0))) == ACTION_BATCHES


def test_the_box2d_limit_loop_replays_as_many_action_sweeps_as_the_pools_get_action_batches(
        monkeypatch) -> None:
    # As for DMC: the Box2D limit loop is told to replay ACTION_BATCHES sweeps
    # of actions, the pools' action process, not to draw fresh ones each step.
    from benchmarks import catalog
    from benchmarks.envs import ACTION_BATCHES

    calls = _fake_subprocess(monkeypatch, catalog, "1234.5\n")
    assert catalog.limit_runner("/x/box2d_limit", "LunarLander-v3", 16, 2, 0.1)() == 1234.5
    assert calls[0][1:] == ["LunarLander-v3", "16", "2", "0.1", str(ACTION_BATCHES)]


def test_the_box2d_limit_loop_runs_with_and_without_a_replay_cycle(tmp_path) -> None:
    # The real loop, built as the catalogue builds it: a replay cycle and the
    # fresh-action default both step the envs and report a positive rate.
    import glob

    import pytest

    from benchmarks import catalog

    # the Box2D sources exist wherever the extension was built or installed from this tree
    # (build_tools/box2d.py puts them there); the loop links the build's objects, or compiles them
    if not glob.glob(os.path.join(ROOT, "build", "native", "box2d", "src-*", "Box2D")):
        pytest.skip("the extension's Box2D sources are not in this tree's build/native")
    exe = catalog._build_box2d_limit(str(tmp_path))
    for extra in ([], ["4"]):
        for env_id in ("LunarLander-v3", "BipedalWalker-v3"):
            out = subprocess.run([exe, env_id, "4", "2", "0.05", *extra], check=True,
                                 capture_output=True, text=True, timeout=120)
            assert float(out.stdout.strip()) > 0.0
    bad = subprocess.run([exe, "LunarLander-v3", "4", "2", "0.05", "4", "extra"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
