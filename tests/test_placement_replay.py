"""The replay role (Ape-X, policy ``apex``): actors write into a replay worker, the learner samples.

The DQN loop is written here as a user would, from the library's fragments: an epsilon-greedy
rollout (each actor with its own fixed epsilon, as in Ape-X), a replay write, a replay sample
and the Q-learning update. Under ``apex`` the batches go from the actors to the replay worker
directly: the learner receives only rewards and done flags, and the sample.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.modules import EGreedyModule

from torchfrag.algos.dqn import make_qnet, q_module
from torchfrag.algos.qlearning import Q_KEYS, QLearn, TensorReplay
from torchfrag.fragments import ReplaySample, ReplayWrite, Rollout
from torchfrag.graph import capture
from torchfrag.policies import PolicyError, as_policy, crossings
from torchfrag.policies.factory import EnvSlice
from torchfrag.runtime import run
from torchfrag.runtime.executor import executor_class

from _policy_helpers import wait_no_children
from test_placement_engine import _env

STEPS = 16


class ApeXDQN(nn.Module):
    """rollout (fixed epsilon) -> replay write -> replay sample -> Q-learning."""

    def __init__(self, env, epsilon: float, updates: int = 8, batch: int = 64) -> None:
        super().__init__()
        self.env = env
        qnet = make_qnet(env, [64, 64])
        greedy = EGreedyModule(env.action_spec_unbatched, eps_init=epsilon, eps_end=epsilon)
        self.rollout = Rollout(TensorDictSequential(qnet, greedy), env, steps=STEPS)
        self.buffer = TensorReplay(20_000)
        self.write = ReplayWrite(self.buffer, in_keys=Q_KEYS)
        self.sample = ReplaySample(self.buffer, batch_size=updates * batch, out_keys=Q_KEYS)
        self.learn = QLearn(q_module(qnet), lr=1e-3, updates=updates, batch_size=batch, gamma=0.99,
                            tau=0.05, max_grad_norm=10.0)

    def forward(self) -> TensorDictBase:
        batch = self.write(self.rollout().select(*Q_KEYS))
        return self.learn(self.sample(batch))

    def close(self) -> None:
        self.env.close()


@dataclass
class ApeXFactory:
    """Actor ``i`` of ``N`` explores with Ape-X's epsilon ``0.4 ** (1 + 7 i / (N - 1))``."""

    envs: int = 8
    actors: int = 2
    seed: int = 0

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        i = env_slice.worker if env_slice is not None else 0
        eps = 0.4 ** (1 + 7 * i / max(1, self.actors - 1))
        return ApeXDQN(_env(self.envs, self.seed, env_slice), eps)


def test_apex_is_data_and_its_executor_a_class():
    loop = ApeXFactory()()
    placement = as_policy({"name": "apex", "actors": 2}).place(capture(loop))
    assert placement.roles == {"rollout": "actor", "write": "replay", "sample": "replay", "learn": "learner"}
    assert placement.kind == "replay" and executor_class("replay").__name__ == "Replay"
    kinds = [(c.src, c.dst) for c in crossings(placement)]
    assert ("rollout@actor[2]", "write@replay[1]") in kinds and ("sample@replay[1]", "learner") in kinds
    loop.close()


def test_apex_refuses_a_loop_without_a_replay():
    from test_placement_engine import ReinforceFactory

    loop = ReinforceFactory()()
    with pytest.raises(PolicyError, match="has no replay buffer .* e.g. algo=dqn"):
        as_policy("apex").place(capture(loop))
    loop.close()


class Between(nn.Module):
    """The Ape-X loop with a user fragment between the rollout and the write (on the learner)."""

    def __init__(self, env, writes_a_key: bool) -> None:
        super().__init__()
        from torchfrag.fragments import Fragment

        class Tap(Fragment):
            """Counts frames (no key written), or also writes a scaled reward."""

            def __init__(self) -> None:
                super().__init__([("next", "reward")], [("next", "reward")] if writes_a_key else [])
                self.register_buffer("frames", torch.zeros((), dtype=torch.int64))

            def forward(self, td: TensorDictBase) -> TensorDictBase:
                self.frames.add_(td.numel())
                if writes_a_key:
                    td.set(("next", "reward"), td.get(("next", "reward")) * 0.1)
                return td

        self.inner = ApeXDQN(env, 0.1)
        self.tap = Tap()

    def forward(self) -> TensorDictBase:
        m = self.inner
        batch = m.write(self.tap(m.rollout()).select(*Q_KEYS))
        return m.learn(m.sample(batch))

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("writes_a_key", [False, True])
def test_apex_keeps_a_fragment_before_the_write_on_the_learner_only_if_it_writes_no_key(writes_a_key):
    loop = Between(_env(4, 0, None), writes_a_key)
    try:
        if writes_a_key:  # its output would be missing from the replay: refused, naming it
            with pytest.raises(PolicyError, match=r"\['tap'\] feed inner_write but are on the learner"):
                as_policy("apex").place(capture(loop))
        else:  # it changes nothing the replay holds: it counts on the learner (DQN's Anneal)
            assert as_policy("apex").place(capture(loop)).roles["tap"] == "learner"
    finally:
        loop.close()


def test_apex_explain_counts_the_bytes_sent():
    factory = ApeXFactory(envs=4, actors=2)
    loop = factory()
    graph = capture(loop)
    policy = {"name": "apex", "actors": 2, "timeout": 60}
    cross = crossings(as_policy(policy).place(graph))
    res = run(graph, policy, iterations=3, factory=factory)
    assert wait_no_children() == []
    assert loop.rollout.frames == 3 * 4 * STEPS
    (to_replay,) = [c for c in cross if c.dst == "write@replay[1]"]
    assert res.extra["comm"]["replay_bytes"] == to_replay.bytes  # never through the learner
    through_driver = sum(c.bytes for c in cross if c is not to_replay)
    assert res.extra["comm"]["bytes"] == through_driver
    loop.close()


def _mean_return(rollout, last: list[float]) -> None:
    got = rollout.stats.pop() if rollout.stats is not None else {}
    if got.get("episodes"):
        last.append(float(got["episode_return"]))


@pytest.mark.slow
def test_dqn_learns_cartpole_under_apex():
    factory = ApeXFactory(envs=8, actors=2)
    loop = factory()
    returns: list[float] = []

    def hook(i, out, graph):
        _mean_return(graph.fragment("rollout"), returns)
        return len(returns) >= 10 and sum(returns[-10:]) / 10 >= 150

    res = run(capture(loop), {"name": "apex", "actors": 2, "timeout": 60}, iterations=400, hooks=[hook],
              factory=factory)
    assert wait_no_children() == []
    frames = loop.rollout.frames
    assert frames == res.iterations * 8 * STEPS  # every actor's frames counted once
    assert res.stopped_by_hook, f"no 150 mean return in {res.iterations} iterations: last {returns[-10:]}"
    loop.close()
