"""``explain`` is exact and pure (issue 25, defect 7).

The loop is written here as a user would: an n-step-style Q loop whose act normalises
observations with running statistics updated in ``forward`` (buffers), explores with an
epsilon buffer, adds a non-scalar per-env feature on the actors, and learns with several
optimizer steps per iteration (declared through ``Fragment.optimizer_steps``). Under every
shipped multi-process policy the bytes ``explain`` reports equal the bytes the runtime counts
(RPC tensors and all-reduced gradients); calling ``explain`` changes no buffer, parameter or
random stream.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.data import LazyTensorStorage, ReplayBuffer

from torchfrag.fragments import Fragment, ReplaySample, ReplayWrite, Rollout
from torchfrag.graph import capture
from torchfrag.policies import as_policy, crossings, explain
from torchfrag.policies.factory import EnvSlice
from torchfrag.runtime import run

from _policy_helpers import wait_no_children
from test_placement_engine import Explorer, Greedy, QLearn, _env
from test_placement_produced_state import CollectFactory

UPDATES = 4
KEYS = ["observation", "action", ("next", "reward"), ("next", "terminated"), ("next", "observation"), "feat"]


class RunningNorm(TensorDictModuleBase):
    """Normalises observations with running statistics updated on every call (buffers)."""

    def __init__(self) -> None:
        super().__init__()
        self.in_keys, self.out_keys = ["observation"], ["observation"]
        self.register_buffer("count", torch.tensor(1e-4))
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        obs = td.get("observation")
        n = obs.reshape(-1, 4).shape[0]
        self.mean.add_((obs.reshape(-1, 4).mean(0) - self.mean) * n / (self.count + n))
        self.count.add_(n)
        return td.set("observation", obs - self.mean)


class Features(Fragment):
    """A per-env fragment adding a non-scalar key (3 floats a frame): runs on the actors."""

    per_env = True

    def __init__(self) -> None:
        super().__init__(["observation"], ["feat"])

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        return td.set("feat", td.get("observation")[..., :3] * 2.0)


class MultiStepQ(QLearn):
    """The user's Q-learner, ``updates`` optimizer steps a call, declared for ``explain``."""

    def __init__(self, qnet: nn.Module) -> None:
        super().__init__(qnet, updates=UPDATES)

    def optimizer_steps(self, frames: int) -> int:
        return self.updates


class NormQLoop(nn.Module):
    def __init__(self, env) -> None:
        super().__init__()
        self.env = env
        self.qnet = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
        self.norm = RunningNorm()
        self.rollout = Rollout(TensorDictSequential(self.norm, Greedy(self.qnet), Explorer(0.5)), env, steps=8)
        self.features = Features()
        self.buffer = ReplayBuffer(storage=LazyTensorStorage(4096))
        self.write = ReplayWrite(self.buffer, in_keys=KEYS)
        self.sample = ReplaySample(self.buffer, batch_size=16 * UPDATES, out_keys=KEYS)
        self.learn = MultiStepQ(self.qnet)

    def forward(self) -> TensorDictBase:
        batch = self.features(self.rollout())
        return self.learn(self.sample(self.write(batch.select(*KEYS))))

    def close(self) -> None:
        self.env.close()


@dataclass
class NormQFactory:
    num_envs: int = 4
    seed: int = 0

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        return NormQLoop(_env(self.num_envs, self.seed, env_slice))


def _predicted(graph, policy, iterations: int) -> int:
    cross = crossings(as_policy(policy).place(graph))
    return iterations * sum(c.bytes for c in cross) + sum(c.once for c in cross)


def _measured(res) -> int:
    """Every tensor byte the run sent: RPC both ways, each rank's all-reduced gradients, and what
    the actors wrote into a replay worker themselves (``apex``: never through the driver)."""
    total = res.extra["comm_total"]
    reduced = res.extra["comm"].get("allreduce_bytes", 0.0) * res.iterations
    written = res.extra["comm"].get("replay_bytes", 0.0) * res.iterations
    return total.bytes_sent + total.bytes_received + int(round(reduced)) + round(written)


POLICIES = [
    {"name": "actors", "advantage": "actors"},
    {"name": "async_actors", "advantage": "actors", "staleness": 100},
    "central_inference",
    "data_parallel",
    {"name": "multi_learner", "learners": 2, "actors_per_learner": 1, "advantage": "actors"},
    {"name": "apex", "actors": 2},  # actors -> replay worker -> learner: two hops, both counted
]
POOLS = {"name": "actor_pools", "pools": {"trainers": 2, "probers": 1},
         "rules": [{"node": "collect", "role": "trainers"}, {"node": "probe", "role": "probers"}]}


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p if isinstance(p, str) else p["name"])
def test_explained_bytes_equal_the_bytes_sent(policy):
    f = NormQFactory()
    loop = f()
    g = capture(loop)
    placement = as_policy(policy).place(g)
    if placement.kind.endswith("replicated_rollout"):  # the non-scalar feature travels from the actors
        assert placement.roles["features"] == "actor"
    predicted = _predicted(g, policy, 3)
    res = run(g, policy, iterations=3, factory=f)
    assert wait_no_children() == []
    assert _measured(res) == predicted
    if "allreduce_calls" in res.extra["comm"]:  # several optimizer steps an iteration, each reduced
        assert res.extra["comm"]["allreduce_calls"] == UPDATES
    loop.close()


def test_explained_bytes_equal_the_bytes_sent_by_two_actor_pools():
    from test_placement_pools import PoolsFactory

    f = PoolsFactory()
    loop = f()
    g = capture(loop)
    predicted = _predicted(g, POOLS, 3)
    res = run(g, POOLS, iterations=3, factory=f)
    assert wait_no_children() == []
    assert res.extra["executor"] == "actor_pools" and _measured(res) == predicted
    loop.close()


def test_collection_only_loop_crosses_processes():
    f = CollectFactory()
    loop = f()
    g = capture(loop)
    text = explain(g, "actors", show=False)
    assert "no edge crosses processes" not in text and "rollout@actor[2]" in text
    res = run(g, "actors", iterations=2, factory=f)
    assert wait_no_children() == []
    assert _measured(res) == _predicted(g, "actors", 2)
    loop.close()


def test_explain_changes_no_state_and_no_random_stream():
    from test_placement_pools import PoolsFactory

    loop = NormQFactory()()
    g = capture(loop)
    pools = PoolsFactory()()  # two rollouts on two actor pools (its factory seeds: build it first)
    pools_graph = capture(pools)
    pools_before = {k: v.clone() for k, v in pools.state_dict().items()}
    torch.manual_seed(3), random.seed(3), np.random.seed(3)
    before = {k: v.clone() for k, v in loop.state_dict().items()}
    streams = (torch.random.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    for policy in ["local", *POLICIES]:
        text = explain(g, policy, show=False)
        assert "pickled" in text or policy == "local"
    assert "pickled" in explain(pools_graph, POOLS, show=False)
    assert all(torch.equal(pools_before[k], v) for k, v in pools.state_dict().items())
    pools.close()
    after = loop.state_dict()
    assert float(after["norm.count"]) == pytest.approx(1e-4)  # the act never ran on fake data
    assert all(torch.equal(before[k], v) for k, v in after.items())
    assert torch.equal(streams[0], torch.random.get_rng_state())
    assert streams[1] == random.getstate() and np.array_equal(streams[2], np.random.get_state()[1])
    assert len(loop.buffer) == 0
    loop.close()


def test_pickled_bytes_reported_beside_tensor_bytes():
    loop = NormQFactory()()
    g = capture(loop)
    for policy in ["actors", "central_inference"]:
        cross = crossings(as_policy(policy).place(g))
        data = [c for c in cross if c.kind == "data"]
        # Keys, shapes and containers around the tensors: pickles are larger, never smaller.
        assert data and all(c.pickled > c.bytes > 0 for c in data)
    loop.close()


def test_undeclared_optimizer_steps_are_assumed_and_said():
    loop = NormQFactory()()
    loop.learn = QLearn(loop.qnet, updates=UPDATES)  # the same learner, declaring nothing
    g = capture(loop)
    (grad,) = [c for c in crossings(as_policy("data_parallel").place(g)) if c.kind == "gradients"]
    assert grad.calls == 1 and "assumed: declare optimizer_steps(frames)" in grad.what
    declared = NormQFactory()()
    (grad4,) = [c for c in crossings(as_policy("data_parallel").place(capture(declared)))
                if c.kind == "gradients"]
    assert grad4.calls == UPDATES and grad4.bytes == UPDATES * grad.bytes
    loop.close(), declared.close()


def test_apex_refuses_a_learner_fragment_before_the_replay_write():
    from torchfrag.policies import PolicyError

    class GlobalFeatures(Features):  # not per env: the apex rules leave it on the learner
        per_env = False

    loop = NormQFactory()()
    placement = as_policy({"name": "apex", "actors": 2}).place(capture(loop))
    assert placement.roles["features"] == "actor"  # per-env: runs on the actors, before their write
    loop.features = GlobalFeatures()
    with pytest.raises(PolicyError, match=r"\['features'\] feed write but are on the learner"):
        as_policy({"name": "apex", "actors": 2}).place(capture(loop))
    loop.close()
