"""The RPC executor: equivalence with local, async staleness, a 2-"node" torchrun run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from torchfrag.graph import capture
from torchfrag.policies import PPOFactory
from torchfrag.runtime import run

from _policy_helpers import CFG, params, wait_no_children

ITER = 3


@pytest.fixture(scope="module")
def local_mode():
    """Parameters after ITER local iterations with deterministic (mode) rollouts."""
    loop = PPOFactory("CartPole-v1", CFG, exploration="mode")()
    run(capture(loop), "local", iterations=ITER)
    return params(loop)


@pytest.fixture(scope="module")
def local_random():
    loop = PPOFactory("CartPole-v1", CFG)()
    run(capture(loop), "local", iterations=ITER)
    return params(loop)


def _run(policy, exploration="random", iterations=ITER):
    f = PPOFactory("CartPole-v1", CFG, exploration=exploration)
    loop = f()
    res = run(capture(loop), policy, iterations=iterations, factory=f)
    assert wait_no_children() == []
    return loop, res


def test_central_inference_equals_local_bit_for_bit(local_random):
    # Actions are sampled on the learner from its own stream: identical arithmetic.
    loop, res = _run({"name": "central_inference", "env_workers": 2})
    assert torch.equal(params(loop), local_random)
    assert res.extra["comm"]["calls"] == pytest.approx(2 * CFG["steps"], abs=1)
    assert loop.rollout.frames == ITER * CFG["num_envs"] * CFG["steps"]


def test_data_parallel_replicas_equal_local_bit_for_bit(local_random):
    # Every replica sees the same data: (g + g) / 2 == g exactly, so the result is local's.
    loop, res = _run({"name": "data_parallel", "workers": 2, "replicate_envs": True})
    assert torch.equal(params(loop), local_random)
    assert res.extra["comm"]["allreduce_calls"] > 0


def test_data_parallel_sharded_differs_but_trains(local_random):
    loop, res = _run({"name": "data_parallel", "workers": 2})
    p = params(loop)
    assert torch.isfinite(p).all() and not torch.equal(p, local_random)
    assert loop.rollout.frames == 2 * ITER * CFG["num_envs"] * CFG["steps"]


@pytest.mark.parametrize("advantage", ["on_arrival", "learner", "actors"])
def test_actors_equal_local(local_mode, advantage):
    # Rollouts are deterministic (mode actions), so trajectories are identical; the act
    # network (and, unless the advantage runs on the gathered batch, the critic) then runs
    # on batches of 2 envs instead of 4, whose matmuls round differently in the last bit:
    # stated tolerance 1e-6 absolute.
    loop, res = _run({"name": "actors", "actors": 2, "advantage": advantage}, exploration="mode")
    torch.testing.assert_close(params(loop), local_mode, rtol=0, atol=1e-6)
    assert res.extra["comm"]["calls"] == 2
    assert res.extra["comm"]["bytes"] > 0


@pytest.mark.parametrize("advantage", ["on_arrival", "actors"])
def test_actors_reward_scale_per_batch_keeps_raw_episode_returns(advantage):
    # Reward scaling and GAE run per actor batch (on arrival or on the actors); the driver's
    # episode statistics still count the env's own rewards, as local's do.
    cfg = {**CFG, "reward_scale": 0.5}
    ref = PPOFactory("CartPole-v1", cfg, exploration="mode")()
    run(capture(ref), "local", iterations=ITER)
    f = PPOFactory("CartPole-v1", cfg, exploration="mode")
    loop = f()
    run(capture(loop), {"name": "actors", "actors": 2, "advantage": advantage}, iterations=ITER, factory=f)
    assert wait_no_children() == []
    assert loop.rollout.stats.returns == ref.rollout.stats.returns and ref.rollout.stats.returns
    torch.testing.assert_close(params(loop), params(ref), rtol=0, atol=1e-6)
    ref.close(), loop.close()


def test_async_actors_staleness_bound():
    loop, res = _run({"name": "async_actors", "actors": 2, "staleness": 1, "prefetch": 2}, iterations=5)
    lag = res.extra["policy_lag"]
    assert lag["max"] <= 1
    assert "policy_lag" in res.output.keys()


@pytest.mark.slow
def test_async_actors_learns_cartpole():
    cfg = {"num_envs": 8, "steps": 128, "minibatch_size": 256, "epochs": 4, "total_frames": 150_000,
           "lr": 1e-3}
    f = PPOFactory("CartPole-v1", cfg, seed=1)
    loop = f()
    returns = []

    def hook(i, out, g):
        ep = loop.rollout.stats.pop()
        if ep:
            returns.append(ep["episode_return"])
        return len(returns) >= 5 and sum(returns[-5:]) / 5 >= 195

    res = run(capture(loop), {"name": "async_actors", "actors": 2, "staleness": 2}, iterations=146,
              hooks=[hook], factory=f)
    assert res.extra["policy_lag"]["max"] <= 2
    assert sum(returns[-5:]) / 5 >= 195, returns[-10:]


def test_torchrun_two_nodes_loopback(tmp_path):
    """Two torchrun invocations (node 0: driver, node 1: one actor) on loopback."""
    from torchfrag.runtime.launcher import free_port

    port = free_port()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root, "TORCHFRAG_RPC_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    common = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
              "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "torchfrag.train",
              "policy=actors", "policy.actors=1", "algo.num_envs=2", "algo.steps=16",
              "algo.minibatch_size=32", "total_frames=96", "eval_episodes=0", "plot=false",
              "progress=false", "logger=none", "checkpoint_every=0"]
    logs = [open(tmp_path / f"node{r}.log", "wb") for r in (0, 1)]
    procs = [subprocess.Popen(common[:5] + ["--node-rank", str(r)] + common[5:] +
                              [f"hydra.run.dir={tmp_path}/node{r}"], env=env, cwd=root,
                              stdout=logs[r], stderr=subprocess.STDOUT, start_new_session=True)
             for r in (0, 1)]
    try:
        for p in procs:
            p.wait(timeout=180)
    finally:
        for p in procs:
            if p.poll() is None:  # torchrun and its worker share the new session
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for f in logs:
            f.close()
    outs = [(tmp_path / f"node{r}.log").read_text(errors="replace") for r in (0, 1)]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    summary = json.loads((tmp_path / "node0" / "summary.json").read_text())
    assert summary["frames"] == 96
    assert wait_no_children() == []
