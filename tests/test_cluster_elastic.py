"""Elastic resume across simulated hosts: a worker host dies, the job is restarted, the run goes on.

The recipe (README, "Several machines"): start every node with the README's ``torchrun`` command, a
fixed ``hydra.run.dir`` and a ``checkpoint_every``; when a host dies the driver stops with
``WorkerDied`` and every node exits; start the same command again on every node (the dead host's
replacement included) with ``resume=<run dir>`` added. The driver resumes from its newest checkpoint
that verifies (weights, optimizer, frame count, iteration); the workers get the driver's weights.

Each host works in a folder of its own (as separate machines would): the checkpoints exist only on
the driver's host, and the worker nodes, given the same ``resume=`` argument, do not look for them.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from torchfrag.runtime.checkpoint import load_checkpoint, load_for_resume
from torchfrag.testing.cluster import Cluster

from test_cluster import T, hosts_empty_after, one_line, wait_all
from test_cluster import three_hosts  # noqa: F401 (a fixture)

ENVS, STEPS, MINIBATCH, EPOCHS = 4, 16, 32, 2
FRAMES = ENVS * STEPS  # per iteration
ADAM_STEPS = EPOCHS * FRAMES // MINIBATCH  # optimizer steps per iteration
ITERATIONS = 12
KILL_AFTER = 3  # kill the worker host once this iteration's checkpoint is written


def node_args(*extra: str) -> list[str]:
    """The training command every node runs (the README's, with a fixed run folder)."""
    return ["-m", "torchfrag.train", "policy=actors", "policy.actors=2", f"policy.timeout={T}",
            f"algo.num_envs={ENVS}", f"algo.steps={STEPS}", f"algo.minibatch_size={MINIBATCH}",
            f"algo.epochs={EPOCHS}", f"total_frames={FRAMES * ITERATIONS}", "checkpoint_every=1",
            # Keep every file: the test reads the one written right after the resume, which the
            # default retention (last 3 + best) removes unless it happens to score best.
            f"checkpoint_keep={ITERATIONS}",
            "eval_episodes=0", "plot=false", "progress=false", "logger=none", "hydra.run.dir=run",
            *extra]


def adam_step(ckpt: dict[str, Any]) -> int:
    """Adam's step counter of the (single) parameter group's first parameter in a checkpoint."""
    return int(ckpt["state"]["learn"]["optimizer"]["state"][0]["step"])


def start_nodes(c: Cluster, homes: list[Path], args: list[str], name: str) -> list:
    return [c.torchrun(i, args, cwd=str(homes[i]), name=name) for i in range(c.n_hosts)]


def test_worker_host_dies_and_the_restarted_job_resumes(three_hosts, tmp_path):
    c = three_hosts
    homes = [tmp_path / f"host{i}" for i in range(3)]
    for home in homes:
        home.mkdir()
    ckpts = homes[0] / "run" / "checkpoints"

    # 1. The first job: killed with host 2 once a few checkpoints are written.
    first = start_nodes(c, homes, node_args(), "job1")
    deadline = time.monotonic() + 120
    while not (ckpts / f"iter_{KILL_AFTER:06d}.pt").exists():
        alive = all(p.poll() is None for p in first)
        assert time.monotonic() < deadline and alive, c.log(0, "job1")[-3000:]
        time.sleep(0.05)
    c.kill(2)
    t_fault = time.monotonic()
    ends = hosts_empty_after(c, t_fault, T + 15)
    assert sorted(ends) == [0, 1, 2], ends
    line = one_line(c.log(0, "job1"), "WorkerDied:")
    assert "worker2 (rank 2, host 198.18.0.3" in line, line
    assert first[0].returncode != 0 and not (homes[0] / "run" / "summary.json").exists()
    _, last = load_for_resume(str(homes[0] / "run"))
    k = int(last["iteration"])
    assert KILL_AFTER <= k < ITERATIONS, k  # interrupted mid-run
    assert last["state"]["frames"] == k * FRAMES and adam_step(last) == k * ADAM_STEPS
    assert not list(homes[1].glob("run/checkpoints/*.pt"))  # only the driver's host has them

    # 2. The same command again on every host, with resume=<run dir>.
    t0 = time.monotonic()
    second = start_nodes(c, homes, node_args("resume=run"), "job2")
    wait_all(second, 150)
    took = time.monotonic() - t0
    logs = "\n".join(c.log(i, "job2")[-2000:] for i in range(3))
    assert [p.poll() for p in second] == [0, 0, 0], logs
    resumed = one_line(c.log(0, "job2"), "resumed from")
    assert f"at iteration {k} ({k * FRAMES} frames)" in resumed, resumed
    for i in (1, 2):
        log = c.log(i, "job2")
        assert "this node serves as a worker; the driver resumes" in log, log[-2000:]

    # The run went on from the checkpoint, not from 0: frames, iterations and Adam's step counter.
    summary = json.loads((homes[0] / "run" / "summary.json").read_text())
    assert summary["frames"] == ITERATIONS * FRAMES and summary["iterations"] == ITERATIONS, summary
    after = load_checkpoint(str(ckpts / f"iter_{k + 1:06d}.pt"))
    assert after["state"]["frames"] == (k + 1) * FRAMES
    assert adam_step(after) == (k + 1) * ADAM_STEPS  # ADAM_STEPS if the optimizer had been reset
    final = load_checkpoint(str(ckpts / "latest.pt"))
    assert final["iteration"] == ITERATIONS and final["state"]["frames"] == ITERATIONS * FRAMES
    assert adam_step(final) == ITERATIONS * ADAM_STEPS
    # Equal in kind to an uninterrupted run: the same state layout, the weights moved on.
    assert final["state"].keys() == last["state"].keys()
    moved = [not torch.equal(a, b) for a, b in zip(final["state"]["model"]["actor"].values(),
                                                   last["state"]["model"]["actor"].values())]
    assert any(moved)
    print(f"elastic resume: killed after iteration {k}; hosts empty after {ends}; "
          f"the restarted job finished in {took:.1f}s")
