"""State in plain Python numbers is reported at placement time (issue 25, defect 10).

The loop is written here as a user would: a softmax actor whose ``temperature`` is a Python
float, decayed by a user fragment after every rollout. Placed apart, the decay would happen
on the driver while the actors keep acting with their own, never-decayed copy.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from torchfrag.algos import make_factory
from torchfrag.fragments import Fragment, Rollout
from torchfrag.graph import capture
from torchfrag.policies import PolicyError, as_policy
from torchfrag.policies.python_state import UnsyncedStateWarning, unsynced_python_state
from torchfrag.runtime import run

DISTRIBUTED = ["actors", "async_actors", "central_inference", "data_parallel", "multi_learner"]


class SoftmaxActor(TensorDictModuleBase):
    """Samples ``action`` from ``softmax(logits / temperature)``; temperature: float or buffer."""

    def __init__(self, buffer: bool) -> None:
        super().__init__()
        self.in_keys, self.out_keys = ["observation"], ["action"]
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
        if buffer:
            self.register_buffer("temperature", torch.tensor(1.0))
        else:
            self.temperature = 1.0

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        probs = torch.softmax(self.net(td.get("observation")) / self.temperature, -1)
        return td.set("action", torch.multinomial(probs, 1).squeeze(-1))


class Cool(Fragment):
    """Decays the actor's temperature after every batch; returns it."""

    impure = True
    passthrough = False

    def __init__(self, actor: SoftmaxActor) -> None:
        super().__init__([], ["temperature"])
        self.actor = actor

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        self.actor.temperature *= 0.9
        return TensorDict(temperature=torch.as_tensor(self.actor.temperature))


class Count(Fragment):
    """Counts the batches it saw in a Python int (placed on the actors by a test)."""

    def __init__(self) -> None:
        super().__init__([], [])
        self.batches = 0

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        self.batches += 1
        return td


class TemperatureLoop(nn.Module):
    def __init__(self, buffer: bool = False, num_envs: int = 4) -> None:
        super().__init__()
        from torchfrag.algos.ppo import make_env

        self.env = make_env("CartPole-v1", num_envs, seed=0)
        self.actor = SoftmaxActor(buffer)
        self.rollout = Rollout(self.actor, self.env, steps=8)
        self.count = Count()
        self.cool = Cool(self.actor)

    def forward(self) -> TensorDictBase:
        return self.cool(self.count(self.rollout()))

    def close(self) -> None:
        self.env.close()


@pytest.fixture
def loop():
    loop = TemperatureLoop()
    yield loop
    loop.close()


def test_float_decayed_in_forward_is_reported_when_placed_apart(loop):
    placement = as_policy("actors").place(capture(loop))
    (msg,) = unsynced_python_state(placement)
    assert "fragment 'cool' changes self.actor.temperature (a Python float)" in msg
    assert "fragment 'rollout' on another process holds the same object" in msg
    assert "register_buffer('temperature'" in msg and "local_state" in msg


def test_number_changed_by_a_fragment_on_the_actors_is_reported(loop):
    placement = as_policy({"name": "actors", "placement": {"count": "actor"}}).place(capture(loop))
    msgs = unsynced_python_state(placement)
    assert any("fragment 'count' changes self.batches (a Python int)" in m
               and "runs on the 'actor' workers" in m for m in msgs), msgs


def test_run_warns_before_any_process_starts(loop):
    with pytest.warns(UnsyncedStateWarning, match=r"'cool' changes self\.actor\.temperature"):
        with pytest.raises(PolicyError, match="cannot be pickled"):
            run(capture(loop), "actors", iterations=1, factory=lambda env_slice=None: None)


def test_one_process_or_a_buffer_is_not_reported():
    float_loop, buffer_loop = TemperatureLoop(buffer=False), TemperatureLoop(buffer=True)
    try:
        # in one process every fragment sees the same float: the run is silent and decays it
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnsyncedStateWarning)
            run(capture(float_loop), "local", iterations=2)
        assert float_loop.actor.temperature == pytest.approx(0.81)
        # a buffer is synced state: not reported when placed apart
        assert unsynced_python_state(as_policy("actors").place(capture(buffer_loop))) == []
    finally:
        float_loop.close()
        buffer_loop.close()


@pytest.mark.parametrize("algo, env_id", [("ppo", "CartPole-v1"), ("a2c", "CartPole-v1"),
                                          ("dqn", "CartPole-v1"), ("sac", "Pendulum-v1"),
                                          ("impala", "CartPole-v1")])
def test_shipped_algorithms_report_nothing(algo, env_id):
    shipped = make_factory(algo, env_id, {"num_envs": 4})()
    try:
        graph = capture(shipped)
        placed = 0
        for name in DISTRIBUTED:
            try:
                placement = as_policy(name).place(graph)
            except PolicyError:
                continue
            placed += 1
            assert unsynced_python_state(placement) == [], (algo, name)
        assert placed >= 3
    finally:
        shipped.close()
