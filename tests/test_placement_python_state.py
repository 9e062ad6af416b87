"""State in plain Python numbers is reported at placement time (issue 25, defect 10).

The loop is written here as a user would: a softmax actor whose ``temperature`` is a Python
float, decayed by a user fragment after every rollout. Placed apart, the decay would happen
on the driver while the actors keep acting with their own, never-decayed copy.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from torchfrag.algos import make_factory
from torchfrag.fragments import Fragment, Rollout
from torchfrag.graph import capture
from torchfrag.policies import PolicyError, as_policy
from torchfrag.policies.python_state import UnsyncedStateWarning, unsynced_buffers, unsynced_python_state
from torchfrag.runtime import run

from _policy_helpers import wait_no_children

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
        placement = as_policy("actors").place(capture(buffer_loop))
        assert unsynced_python_state(placement) == [] and unsynced_buffers(placement) == []
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
            assert unsynced_buffers(placement) == [], (algo, name)
        assert placed >= 3
    finally:
        shipped.close()


# -- buffers changed in forward where nothing carries them ---------------------------------------


class FrameCounter(Fragment):
    """Counts the frames it saw in a buffer of its own (a per-env fragment a test puts on the actors)."""

    per_env = True

    def __init__(self, merged: bool) -> None:
        super().__init__(["observation"], [])
        self.merged = merged
        self.register_buffer("frames", torch.zeros((), dtype=torch.int64))

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        self.frames.add_(td.numel())
        return td

    def produced_state(self) -> dict[str, torch.Tensor]:
        return {"frames": self.frames} if self.merged else {}


class CountingLoop(nn.Module):
    def __init__(self, merged: bool, num_envs: int = 4) -> None:
        super().__init__()
        from torchfrag.algos.ppo import make_env

        self.env = make_env("CartPole-v1", num_envs, seed=0)
        self.actor = SoftmaxActor(buffer=True)
        self.rollout = Rollout(self.actor, self.env, steps=8)
        self.count = FrameCounter(merged)

    def forward(self) -> TensorDictBase:
        return self.count(self.rollout())

    def close(self) -> None:
        self.env.close()


@dataclass
class CountingFactory:
    merged: bool

    def __call__(self, env_slice=None) -> nn.Module:
        return CountingLoop(self.merged, 4 if env_slice is None else env_slice.count)


ON_ACTORS = {"name": "actors", "actors": 2, "placement": {"count": "actor"}, "timeout": 60}


def test_buffer_counted_on_the_actors_without_a_merge_is_reported():
    loop = CountingLoop(merged=False)
    try:
        (msg,) = unsynced_buffers(as_policy(ON_ACTORS).place(capture(loop)))
        assert "fragment 'count' changes the buffer self.frames in forward" in msg, msg
        assert "runs on the 'actor' workers" in msg and "produced_state()" in msg, msg
        # the run says so before it starts
        with pytest.warns(UnsyncedStateWarning, match=r"'count' changes the buffer self\.frames"):
            run(capture(loop), ON_ACTORS, iterations=1, factory=CountingFactory(False))
        assert int(loop.count.frames) == 0  # what the warning is about: the driver never counted
    finally:
        loop.close()
    assert wait_no_children() == []


def test_buffer_returned_as_produced_state_is_merged_and_not_reported():
    loop = CountingLoop(merged=True)
    try:
        assert unsynced_buffers(as_policy(ON_ACTORS).place(capture(loop))) == []
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnsyncedStateWarning)
            run(capture(loop), ON_ACTORS, iterations=3, factory=CountingFactory(True))
        assert int(loop.count.frames) == 3 * 4 * 8  # every frame any actor saw, as under local
    finally:
        loop.close()
    assert wait_no_children() == []


class Calibrate(Fragment):
    """On the driver: halves a scale that a fragment on the actors uses."""

    impure = True
    passthrough = False

    def __init__(self, scale: nn.Module) -> None:
        super().__init__([], ["scale"])
        self.scale = scale

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        self.scale.factor.mul_(0.5)
        return TensorDict(scale=self.scale.factor.clone())


class ScaleReward(Fragment):
    """Per env, on the actors: scales the reward; holds the scale module without declaring it."""

    per_env = True

    def __init__(self, scale: nn.Module, declared: bool) -> None:
        super().__init__([("next", "reward")], [("next", "reward")], reads=scale if declared else None)
        self.scale = scale

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        return td.set(("next", "reward"), td.get(("next", "reward")) * self.scale.factor)


class CalibratedLoop(nn.Module):
    def __init__(self, declared: bool) -> None:
        super().__init__()
        from torchfrag.algos.ppo import make_env

        self.env = make_env("CartPole-v1", 4, seed=0)
        self.scale = nn.Module()
        self.scale.register_buffer("factor", torch.tensor(1.0))
        self.rollout = Rollout(SoftmaxActor(buffer=True), self.env, steps=8)
        self.shape = ScaleReward(self.scale, declared)
        self.calibrate = Calibrate(self.scale)

    def forward(self) -> TensorDictBase:
        return self.calibrate(self.shape(self.rollout()))

    def close(self) -> None:
        self.env.close()


@pytest.mark.parametrize("declared", [False, True])
def test_driver_changing_a_buffer_that_actors_hold_undeclared_is_reported(declared):
    loop = CalibratedLoop(declared)
    try:
        msgs = unsynced_buffers(as_policy({"name": "actors", "placement": {"shape": "actor"}})
                                .place(capture(loop)))
        if declared:  # reads=scale: the buffer follows the driver's like the weights
            assert msgs == []
        else:
            assert len(msgs) == 1, msgs
            assert "fragment 'calibrate' changes the buffer self.scale.factor" in msgs[0], msgs
            assert "fragment 'shape' on the 'actor' workers holds it" in msgs[0], msgs
            assert "reads=" in msgs[0]
    finally:
        loop.close()
