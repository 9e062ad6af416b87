"""Loops with two rollouts under the actors policies (issue 25, defect 8).

The loop is written here as a user would: a policy-gradient learner trained on the batches
of one rollout while a second rollout, on an env of another size, probes the same actor.
Either rollout may be the one the actors replicate; the frames each collects are counted
exactly, no false "fewer frames than asked" warning is given, the factory check looks at the
rollout that is placed, and a placement that puts both rollouts on the actors is refused
before any process starts with a message that says what to do.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
import torch
from tensordict import TensorDictBase
from torch import nn

from torchfrag.fragments import Rollout
from torchfrag.graph import capture
from torchfrag.policies import PolicyError, as_policy
from torchfrag.policies.factory import EnvSlice
from torchfrag.runtime import run

from _policy_helpers import children, wait_no_children
from test_placement_engine import PolicyGradient, ReinforceLoop, ReturnToGo, _env

STEPS = 8


class TrainAndProbe(nn.Module):
    """``collect`` feeds the learner; ``probe`` runs the same actor on other envs each iteration."""

    def __init__(self, train_env, probe_env, exploration: str = "random") -> None:
        super().__init__()
        self.train_env, self.probe_env = train_env, probe_env
        self.actor = ReinforceLoop(train_env, STEPS, "random").actor
        self.probe = Rollout(self.actor, probe_env, steps=STEPS // 2, exploration=exploration)
        self.collect = Rollout(self.actor, train_env, steps=STEPS, exploration=exploration)
        self.returns = ReturnToGo()
        self.learn = PolicyGradient(self.actor)

    def forward(self) -> TensorDictBase:
        self.probe()
        return self.learn(self.returns(self.collect()))

    def close(self) -> None:
        self.train_env.close()
        self.probe_env.close()


@dataclass
class TwoRolloutsFactory:
    """Slices the envs of the rollout named ``sliced`` (the one the policy puts on the actors)."""

    train_envs: int = 4
    probe_envs: int = 2
    sliced: str = "collect"
    seed: int = 0

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        train = _env(self.train_envs, self.seed, env_slice if self.sliced == "collect" else None)
        probe = _env(self.probe_envs, self.seed + 1, env_slice if self.sliced == "probe" else None)
        return TrainAndProbe(train, probe)


def _run_counted(factory: TwoRolloutsFactory, policy: dict, iterations: int, caplog) -> TrainAndProbe:
    loop = factory()
    with caplog.at_level(logging.WARNING):
        res = run(capture(loop), policy, iterations=iterations, factory=factory)
    assert wait_no_children() == []
    assert res.iterations == iterations and res.extra["frames_missing"] == 0
    assert "fewer than asked" not in caplog.text
    return loop


@pytest.mark.parametrize("placed", ["collect", "probe"])
def test_either_rollout_on_the_actors_counts_its_frames(placed, caplog):
    f = TwoRolloutsFactory(sliced=placed)
    policy = {"name": "actors", "actors": 2, "placement": {placed: "actor"}}
    roles = as_policy(policy).place(capture(f())).roles
    assert roles[placed] == "actor" and [n for n, r in roles.items() if r == "actor"] == [placed]
    loop = _run_counted(f, policy, 3, caplog)
    # Each rollout counted once, whichever ran on the actors: 3 iterations of its envs x steps.
    assert loop.collect.frames == 3 * f.train_envs * STEPS
    assert loop.probe.frames == 3 * f.probe_envs * (STEPS // 2)
    loop.close()


def test_factory_check_looks_at_the_placed_rollout():
    # Slices the probe (the placed rollout) and leaves the training envs whole: that is the
    # contract, even though the first-built training rollout does not match the slice.
    policy = {"name": "actors", "actors": 2, "placement": {"probe": "actor"}}
    loop = TwoRolloutsFactory(sliced="probe")()
    before = len(children())
    run(capture(loop), policy, iterations=1, factory=TwoRolloutsFactory(sliced="probe"))
    assert wait_no_children() == []
    # Slicing the training envs while the probe is the placed rollout breaks it: refused at once.
    with pytest.raises(PolicyError, match="ignores its env slice.*rollout 'probe' over 2 envs, not 1"):
        run(capture(loop), policy, iterations=1, factory=TwoRolloutsFactory(sliced="collect"))
    assert len(children()) == before
    loop.close()


@pytest.mark.parametrize("policy", [
    {"name": "actors", "placement": {"collect": "actor", "probe": "actor"}},
    {"name": "actors", "rules": [{"tag": "rollout", "role": "actor"}]},
    {"name": "async_actors", "rules": [{"node": "collect", "role": "actor"}]},
])
def test_both_rollouts_on_the_actors_refused_with_what_to_do(policy):
    loop = TwoRolloutsFactory()()
    g = capture(loop)
    before = len(children())
    with pytest.raises(PolicyError, match=r"rollouts \['probe', 'collect'\] on the workers.*"
                                          r"placement: \{collect: learner\}"):
        run(g, policy, iterations=1, factory=TwoRolloutsFactory())
    assert len(children()) == before
    loop.close()


# ------------------------------------------------------------------------------------------
# two rollouts under the replicated policies (issue 25, defect 6): every replica (data_parallel)
# or learner (multi_learner) runs both rollouts; the frames of each are counted on its own
# rollout, and a worker's slice names the rollout it divides.
@dataclass
class NodeSlicingFactory(TwoRolloutsFactory):
    """Slices the rollout its env slice names (``env_slice.node``), as a factory of a loop with
    several rollouts should; records every slice it was given."""

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        if env_slice is not None:
            assert env_slice.node in ("collect", "probe"), env_slice  # several rollouts: named
            self.sliced = env_slice.node
        return super().__call__(env_slice)


@pytest.mark.parametrize("policy, placed", [
    ({"name": "data_parallel", "workers": 2}, None),
    ({"name": "multi_learner", "learners": 2, "actors_per_learner": 1}, "probe"),
    ({"name": "multi_learner", "learners": 2, "actors_per_learner": 1, "placement": {"collect": "actor"}},
     "collect"),
])
def test_replicated_two_rollouts_count_every_rollouts_frames(policy, placed, caplog):
    f = NodeSlicingFactory()
    if placed is not None:
        roles = as_policy(policy).place(capture(f())).roles
        assert [n for n, r in roles.items() if r == "actor"] == [placed]
    loop = _run_counted(f, policy, 3, caplog)
    # Two replicas (or learners) each ran both rollouts on envs of the driver's sizes, every
    # iteration: collect 4 envs x 8 steps, probe 2 envs x 4 steps. Before the fix, the replica's
    # slice was sized from the first rollout (probe, 2 envs) and applied to collect: 96 of 128.
    assert loop.collect.frames == 3 * 2 * f.train_envs * STEPS
    assert loop.probe.frames == 3 * 2 * f.probe_envs * (STEPS // 2)
    loop.close()


def test_replicated_factory_slicing_another_rollout_refused():
    """A factory that slices ``collect`` while the replicas' slice divides ``probe`` (the loop's
    first rollout) would run ``collect`` on 2 envs instead of 4 on every replica: refused."""
    f = TwoRolloutsFactory(sliced="collect")
    loop = f()
    before = len(children())
    with pytest.raises(PolicyError, match=r"sliced the wrong rollout.*rollout 'collect' over 2 envs, not its 4.*"
                                          r"divides rollout 'probe'"):
        run(capture(loop), {"name": "data_parallel", "workers": 2}, iterations=1, factory=f)
    assert len(children()) == before
    loop.close()
