"""Buffers marked each replica's own (``torchfrag.fragments.per_replica``) survive every sync.

The Ape-X loop is written here as a user would: actor ``i`` of ``N`` explores with its own
epsilon ``0.4 ** (1 + 7 i / (N - 1))`` (TorchRL's ``EGreedyModule`` keeps it in buffers).
By default buffers follow the learner's, as parameters do, so both actors act with the
driver's epsilon (the control); marked with :func:`per_replica`, each actor keeps its own
through every iteration while its parameters still follow the learner's.
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
from torchfrag.fragments import ReplaySample, ReplayWrite, Rollout, per_replica
from torchfrag.graph import capture
from torchfrag.policies.factory import EnvSlice
from torchfrag.runtime import run

from _policy_helpers import wait_no_children
from test_placement_engine import _env

ENVS, STEPS, ACTORS = 4, 8, 2
EPS_KEYS = ("eps", "eps_init", "eps_end")


class ExploringApeX(nn.Module):
    """rollout (epsilon-greedy) -> replay write -> replay sample -> Q-learning."""

    def __init__(self, env, epsilon: float, own_epsilon: bool) -> None:
        super().__init__()
        self.env = env
        self.epsilon = epsilon  # what the factory meant this copy to explore with
        qnet = make_qnet(env, [16])
        self.greedy = EGreedyModule(env.action_spec_unbatched, eps_init=epsilon, eps_end=epsilon)
        if own_epsilon:
            per_replica(self.greedy, *EPS_KEYS)
        self.rollout = Rollout(TensorDictSequential(qnet, self.greedy), env, steps=STEPS)
        self.buffer = TensorReplay(2048)
        self.write = ReplayWrite(self.buffer, in_keys=Q_KEYS)
        self.sample = ReplaySample(self.buffer, batch_size=32, out_keys=Q_KEYS)
        self.learn = QLearn(q_module(qnet), lr=1e-3, updates=1, batch_size=32, gamma=0.99, tau=0.05,
                            max_grad_norm=10.0)

    def forward(self) -> TensorDictBase:
        return self.learn(self.sample(self.write(self.rollout().select(*Q_KEYS))))

    def close(self) -> None:
        self.env.close()


@dataclass
class ExploringFactory:
    own_epsilon: bool

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(0)
        i = env_slice.worker if env_slice is not None else 0
        eps = 0.4 ** (1 + 7 * i / (ACTORS - 1))
        return ExploringApeX(_env(ENVS, 0, env_slice), eps, self.own_epsilon)


def actor_exploration() -> tuple[float, float, torch.Tensor]:
    """On an actor: (the epsilon it acts with, the one its factory gave it, its first weight)."""
    from torchfrag.runtime.worker import WORKER

    loop = WORKER["loop"]
    weight = next(loop.rollout.parameters()).detach().clone()
    return float(loop.greedy.eps), loop.epsilon, weight


def _run(own_epsilon: bool, iterations: int = 3) -> list[list[tuple[float, float, torch.Tensor]]]:
    from torch.distributed import rpc

    seen: list[list[tuple[float, float, torch.Tensor]]] = []
    factory = ExploringFactory(own_epsilon)
    loop = factory()

    def check(i: int) -> None:
        actors = [rpc.rpc_sync(w, actor_exploration) for w in ("worker2", "worker3")]
        seen.append(actors + [(float(loop.greedy.eps), loop.epsilon, next(loop.rollout.parameters()).detach().clone())])

    run(capture(loop), {"name": "apex", "actors": ACTORS, "timeout": 60}, iterations=iterations,
        factory=factory, hooks=[lambda i, _out, _g: check(i)])
    loop.close()
    assert wait_no_children() == []
    return seen


def _differ_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "built buffers differently" in r.getMessage()]


def test_marked_epsilon_stays_each_actors_own_under_apex(caplog) -> None:
    caplog.set_level("WARNING", logger="torchfrag.runtime.executor")
    seen = _run(own_epsilon=True)
    assert _differ_warnings(caplog) == []  # marked: nothing to say
    for i, (a, b, driver) in enumerate(seen):
        assert a[0] == pytest.approx(a[1]) and b[0] == pytest.approx(b[1]), f"iteration {i}: {a[:2]}, {b[:2]}"
        assert a[0] != pytest.approx(b[0]), "the two actors should explore differently"
        # parameters still follow the learner's: the actors ran with the weights the driver had
        # when the iteration began (it has stepped since), the same on both actors
        assert torch.equal(a[2], b[2]), f"iteration {i}: the actors' weights differ"
    assert not torch.equal(seen[0][0][2], seen[-1][0][2]), "the actors' weights never followed the learner"


def test_unmarked_epsilon_follows_the_learner_under_apex(caplog) -> None:
    """The control: without the mark a buffer is synced like a parameter (the documented default).

    The factory built actor 2's epsilon differently from the driver's: the run says so once,
    naming the buffers and the worker, and how to keep it.
    """
    caplog.set_level("WARNING", logger="torchfrag.runtime.executor")
    seen = _run(own_epsilon=False, iterations=2)
    (msg,) = _differ_warnings(caplog)
    assert "greedy.eps on worker3" in msg and "greedy.eps_init on worker3" in msg, msg
    assert "worker2" not in msg, msg  # actor 1's epsilon is the driver's (0.4): not reported
    assert "per_replica(module" in msg, msg
    driver_eps = seen[0][2][0]
    for a, b, _ in seen:
        assert a[0] == pytest.approx(driver_eps) and b[0] == pytest.approx(driver_eps)
    assert any(actor[1] != pytest.approx(driver_eps) for actor in seen[0][:2]), "no actor was built differently"


def test_marked_buffers_leave_the_shared_state_and_are_not_overwritten() -> None:
    loop = ExploringFactory(own_epsilon=True)()
    other = ExploringFactory(own_epsilon=False)()
    try:
        keys = set(loop.rollout.shared_state())
        assert not any(k.endswith(".eps") for k in keys), sorted(keys)
        assert any(k.endswith(".eps") for k in other.rollout.shared_state())
        loop.greedy.eps.fill_(0.05)
        loop.rollout.load_shared_state({k: v.clone() for k, v in loop.rollout.shared_state().items()})
        assert float(loop.greedy.eps) == pytest.approx(0.05)
    finally:
        loop.close()
        other.close()


@pytest.mark.parametrize("names,match", [((), "at least one buffer"),
                                         (("epsilon",), r"\['epsilon'\] are not buffers of EGreedyModule")])
def test_per_replica_refuses_what_is_not_a_buffer(names, match) -> None:
    from torchrl.data import Categorical

    greedy = EGreedyModule(Categorical(2), eps_init=0.1)
    with pytest.raises(ValueError, match=match):
        per_replica(greedy, *names)
