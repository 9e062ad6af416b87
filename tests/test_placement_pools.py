"""Two actor pools running two rollouts on two envs (policy ``actor_pools``), from YAML only.

The loop is a user's: a learner trained on one rollout (``collect``, 4 envs) while a second
rollout (``probe``, 2 envs of another seed) runs the same actor. The user's policy, a YAML file
written here, names two new roles (``trainers``, ``probers``) with a size each and puts one
rollout on each; every pool steps its own env slices and gets the learner's state.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from torchfrag.graph import capture
from torchfrag.policies import PolicyError, as_policy, crossings
from torchfrag.policies.factory import EnvSlice
from torchfrag.runtime import run

from _policy_helpers import wait_no_children
from test_placement_engine import _env
from test_placement_two_rollouts import STEPS, TrainAndProbe

YAML = """
defaults:
  - actor_pools_schema
name: my_pools
kind: actor_pools
pools: {trainers: 2, probers: 1}
rules:
  - {node: collect, role: trainers}
  - {node: probe, role: probers}
"""


@dataclass
class PoolsFactory:
    """Slices the rollout an env slice names (each pool slices its own rollout's envs)."""

    train_envs: int = 4
    probe_envs: int = 2
    seed: int = 0

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        node = env_slice.node if env_slice is not None else None
        train = _env(self.train_envs, self.seed, env_slice if node == "collect" else None)
        probe = _env(self.probe_envs, self.seed + 1, env_slice if node == "probe" else None)
        return TrainAndProbe(train, probe)


def _probe_actor_state() -> torch.Tensor:
    """On a worker: the first parameter of its probe rollout's actor."""
    from torchfrag.runtime.worker import WORKER

    return next(WORKER["loop"].probe.parameters()).detach().clone()


def test_two_pools_from_yaml(tmp_path):
    from torch.distributed import rpc

    path = tmp_path / "my_pools.yaml"
    path.write_text(YAML)
    policy = as_policy(str(path))
    f = PoolsFactory()
    loop = f()
    graph = capture(loop)
    placement = policy.place(graph)
    assert placement.kind == "actor_pools"
    assert placement.roles == {"probe": "probers", "collect": "trainers", "returns": "learner", "learn": "learner"}
    cross = crossings(placement)
    assert {c.dst for c in cross if c.kind == "state"} == {"collect@trainers[2]", "probe@probers[1]"}

    sent = [next(loop.probe.parameters()).detach().clone()]  # what the first requests carry

    def check(i, _out, _g) -> None:
        # worker3 is the probe pool's actor: it ran this iteration with the learner's state as
        # it was when the iteration started (the learner stepped after)
        theirs = rpc.rpc_sync("worker3", _probe_actor_state)
        assert torch.equal(theirs, sent[-1])
        sent.append(next(loop.probe.parameters()).detach().clone())
        assert not torch.equal(sent[-1], sent[-2])  # the learner did step

    res = run(graph, policy, iterations=3, factory=f, hooks=[check])
    assert wait_no_children() == []
    assert loop.collect.frames == 3 * 4 * STEPS and loop.probe.frames == 3 * 2 * (STEPS // 2)
    assert res.extra["frames_missing"] == 0 and res.extra["executor"] == "actor_pools"
    assert res.extra["comm"]["bytes"] == sum(c.bytes for c in cross)  # explain = what was sent
    loop.close()


def test_a_pool_without_a_rollout_is_refused(tmp_path):
    f = PoolsFactory()
    loop = f()
    policy = {"name": "actor_pools", "pools": {"trainers": 2, "probers": 1},
              "rules": [{"node": "collect", "role": "trainers"}]}
    with pytest.raises(PolicyError, match="pool 'probers' must hold one rollout"):
        as_policy(policy).place(capture(loop))
    with pytest.raises(PolicyError, match="pool 'x' needs an integer >= 1"):
        as_policy({"name": "actor_pools", "pools": {"x": 0}}).place(capture(loop))
    loop.close()
