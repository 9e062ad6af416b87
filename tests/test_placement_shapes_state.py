"""State agreement after every iteration under ``apex`` and ``actor_pools`` (issue 25).

The loops are written here as a user would, with state of every kind on the workers: the
actors' network parameters and the exploration's buffers (sent by the learner), a frame
counter and a running normaliser (produced where the envs run, merged back by adding
increments; both from :mod:`test_placement_produced_state`). After every iteration
:class:`~test_placement_produced_state.ActorsAgree` asks every actor for its state: each ran
with the driver's parameters and buffers of the iteration's start, and the driver holds the
sum of their increments. The normaliser's statistics must also equal those recomputed from
every observation the actors saw (on the replay worker under ``apex``, in the learner's
batches under ``actor_pools``). Negative controls: actors left stale (``sync_every=2``) fail.

Mixed executors: a YAML policy whose two groups name different executors (the training
rollout on a synchronous pool, the probe on an asynchronous one) runs under ``actor_pools``;
checked against ``local`` (the same parameters after three iterations), with the synchronous
pool's state checked every iteration and ``explain``'s bytes equal to those sent.
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
from torchfrag.policies import as_policy
from torchfrag.policies.factory import EnvSlice

from _policy_helpers import wait_no_children
from test_placement_engine import PolicyGradient, ReinforceLoop, ReturnToGo, _env, _explained_bytes, _measured_bytes
from test_placement_produced_state import ActorsAgree, FrameCounter, RunningNorm, _check_counts, _run_checked

ENVS, STEPS = 4, 16
FRAMES = ENVS * STEPS


def _moments(obs: torch.Tensor) -> dict[str, torch.Tensor]:
    """The normaliser's statistics recomputed from observations (one row each)."""
    obs = obs.double().reshape(-1, 4)
    return {"count": torch.tensor(obs.shape[0]), "total": obs.sum(0), "squares": (obs**2).sum(0)}


def _assert_moments(norm: RunningNorm, obs: torch.Tensor, i: int) -> None:
    for key, value in _moments(obs).items():
        torch.testing.assert_close(getattr(norm, key), value.to(getattr(norm, key).dtype), rtol=1e-12,
                                   atol=1e-9, msg=f"iteration {i}: {key} is not recomputed from every observation")


# ------------------------------------------------------------------------------------------
# apex: rollout -> counter -> normaliser on the actors, the replay on its worker, Q-learning
class CountedApeX(nn.Module):
    def __init__(self, env) -> None:
        super().__init__()
        self.env = env
        qnet = make_qnet(env, [32, 32])
        greedy = EGreedyModule(env.action_spec_unbatched, eps_init=0.3, eps_end=0.3)
        self.rollout = Rollout(TensorDictSequential(qnet, greedy), env, steps=STEPS)
        self.counter = FrameCounter()
        self.norm = RunningNorm()
        self.buffer = TensorReplay(4096)
        self.write = ReplayWrite(self.buffer, in_keys=Q_KEYS)
        self.sample = ReplaySample(self.buffer, batch_size=2 * 32, out_keys=Q_KEYS)
        self.learn = QLearn(q_module(qnet), lr=1e-3, updates=2, batch_size=32, gamma=0.99, tau=0.05,
                            max_grad_norm=10.0)

    def forward(self) -> TensorDictBase:
        batch = self.write(self.norm(self.counter(self.rollout())).select(*Q_KEYS))
        return self.learn(self.sample(batch))

    def close(self) -> None:
        self.env.close()


@dataclass
class CountedApeXFactory:
    seed: int = 0

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        return CountedApeX(_env(ENVS, self.seed, env_slice))


def _replay_observations() -> torch.Tensor:
    """On the replay worker: every observation written into its buffer (none overwritten here)."""
    from torchfrag.runtime.worker import WORKER

    buffer = WORKER["loop"].buffer
    return buffer._columns["observation"][:len(buffer)].clone()


APEX = {"name": "apex", "actors": 2, "timeout": 60}
CHAIN = ["rollout", "counter", "norm"]


def _apex_run(policy: dict, iterations: int) -> ActorsAgree:
    from torch.distributed import rpc

    f = CountedApeXFactory()
    agree = ActorsAgree(f, {"worker2": CHAIN, "worker3": CHAIN})  # worker1 is the replay worker

    def check(loop: CountedApeX, i: int) -> None:
        _check_counts(loop, i)  # the driver counted every actor's frames once
        agree(loop, i)
        _assert_moments(loop.norm, rpc.rpc_sync("worker1", _replay_observations), i)

    _run_checked(policy, iterations, check, factory=f).close()
    return agree


def test_apex_state_agrees_after_every_iteration() -> None:
    loop = CountedApeXFactory()()
    placement = as_policy(APEX).place(capture(loop))
    loop.close()
    assert {n: placement.roles[n] for n in CHAIN} == dict.fromkeys(CHAIN, "actor")
    assert _apex_run(APEX, 3).checked == 3


def test_apex_negative_control_detects_stale_actors() -> None:
    """sync_every=2: in the second iteration the actors act with the first iteration's weights."""
    with pytest.raises(AssertionError, match="iteration 1: worker2 ran rollout.* stale"):
        _apex_run({**APEX, "sync_every": 2}, 2)
    assert wait_no_children() == []


# ------------------------------------------------------------------------------------------
# actor_pools: two pools (a YAML policy written here), each with its own rollout and counter
class CountedPools(nn.Module):
    """``collect`` (counted, normalised) feeds the learner; ``probe`` (counted) runs the same actor."""

    def __init__(self, train_env, probe_env, exploration: str = "random") -> None:
        super().__init__()
        self.train_env, self.probe_env = train_env, probe_env
        self.actor = ReinforceLoop(train_env, STEPS, "random").actor
        self.probe = Rollout(self.actor, probe_env, steps=STEPS // 2, exploration=exploration)
        self.probe_counter = FrameCounter()
        self.collect = Rollout(self.actor, train_env, steps=STEPS, exploration=exploration)
        self.counter = FrameCounter()
        self.norm = RunningNorm()
        self.returns = ReturnToGo()
        self.learn = ObservedLearn(self.actor)

    @property
    def rollout(self) -> Rollout:  # what _check_counts reads
        return self.collect

    def forward(self) -> TensorDictBase:
        self.probe_counter(self.probe())
        return self.learn(self.returns(self.norm(self.counter(self.collect()))))

    def close(self) -> None:
        self.train_env.close()
        self.probe_env.close()


class ObservedLearn(PolicyGradient):
    """The user's learner; keeps every observation of the batches it learns from."""

    def __init__(self, actor: nn.Module) -> None:
        super().__init__(actor)
        self.observations: list[torch.Tensor] = []

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        self.observations.append(td.get("observation").detach().clone())
        return super().forward(td)


@dataclass
class CountedPoolsFactory:
    seed: int = 0
    exploration: str = "random"

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        node = env_slice.node if env_slice is not None else None
        train = _env(ENVS, self.seed, env_slice if node == "collect" else None)
        probe = _env(2, self.seed + 1, env_slice if node == "probe" else None)
        return CountedPools(train, probe, self.exploration)


#: Each pool's rollout and the counters chained after it (the policies below name the two pools).
RULES = """rules:
  - {node: collect, role: trainers}
  - {node: counter, role: trainers}
  - {node: norm, role: trainers}
  - {node: probe, role: probers}
  - {node: probe_counter, role: probers}
"""
YAML = """
defaults:
  - actor_pools_schema
name: counted_pools
kind: actor_pools
pools: {trainers: 2, probers: 1}
sync_every: 1
""" + RULES
TRAIN = ["collect", "counter", "norm"]
PROBE = ["probe", "probe_counter"]


def _pools_run(tmp_path, iterations: int, sync_every: int = 1) -> ActorsAgree:
    path = tmp_path / "counted_pools.yaml"
    path.write_text(YAML.replace("sync_every: 1", f"sync_every: {sync_every}"))
    policy = as_policy(str(path))
    f = CountedPoolsFactory()
    agree = ActorsAgree(f, {"worker1": TRAIN, "worker2": TRAIN, "worker3": PROBE})

    def check(loop: CountedPools, i: int) -> None:
        _check_counts(loop, i)
        assert int(loop.probe_counter.frames) == loop.probe.frames == (i + 1) * 2 * (STEPS // 2)
        agree(loop, i)
        _assert_moments(loop.norm, torch.cat([o.reshape(-1, 4) for o in loop.learn.observations]), i)

    loop = CountedPoolsFactory()()
    assert policy.place(capture(loop)).roles == {**dict.fromkeys(TRAIN, "trainers"), **dict.fromkeys(PROBE, "probers"),
                                                 "returns": "learner", "learn": "learner"}
    loop.close()
    _run_checked(policy, iterations, check, factory=f).close()
    return agree


def test_actor_pools_state_agrees_after_every_iteration(tmp_path) -> None:
    assert _pools_run(tmp_path, 3).checked == 3


def test_actor_pools_negative_control_detects_stale_actors(tmp_path) -> None:
    with pytest.raises(AssertionError, match="iteration 1: worker1 ran collect.* stale"):
        _pools_run(tmp_path, 2, sync_every=2)
    assert wait_no_children() == []


# ------------------------------------------------------------------------------------------
# mixed executors: the training rollout on a synchronous pool, the probe on an asynchronous one
MIXED = """
name: sync_train_async_probe
groups:
  trainers: {size: 2, executor: replicated_rollout}
  probers: {size: 1, executor: async_replicated_rollout, options: {staleness: 3}}
""" + RULES


def _prober_params() -> torch.Tensor:
    """On the asynchronous prober: its actor's parameters, between two of its rollouts."""
    from torchfrag.runtime.worker import WORKER

    with WORKER["lock"]:
        return torch.cat([p.detach().reshape(-1) for p in WORKER["loop"].probe.parameters()])


def _params(loop: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in loop.actor.parameters()])


def test_sync_and_async_pools_mixed_equal_local(tmp_path) -> None:
    """Groups naming two executors, from YAML only: the learner's rollout on a synchronous pool
    (its state checked after every iteration, its learning equal to ``local``'s), the probe on an
    asynchronous pool acting with some version the learner had (never a newer one), its frames
    and counter merged exactly."""
    from torch.distributed import rpc

    from torchfrag.policies import load_policy_file
    from torchfrag.runtime import run

    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED)
    policy = load_policy_file(str(path))
    f = CountedPoolsFactory(exploration="mode")
    local = f()
    run(capture(local), "local", iterations=3)

    agree = ActorsAgree(f, {"worker1": TRAIN, "worker2": TRAIN})
    fresh = f()
    versions = [_params(fresh)]  # the state every actor starts from
    fresh.close()

    def check(loop: CountedPools, i: int) -> None:
        _check_counts(loop, i)
        agree(loop, i)
        assert int(loop.probe_counter.frames) == loop.probe.frames == (i + 1) * 2 * (STEPS // 2)
        theirs = rpc.rpc_sync("worker3", _prober_params)
        assert any(torch.equal(theirs, v) for v in versions), f"iteration {i}: the prober acts with no version"
        versions.append(_params(loop))

    loop = f()
    graph = capture(loop)
    assert policy.place(graph).kind == "actor_pools"  # from the groups' two executors
    res = run(graph, policy, iterations=3, factory=f, hooks=[lambda i, _o, _g: check(loop, i)])
    assert wait_no_children() == []
    assert res.extra["executor"] == "actor_pools"
    assert res.extra["policy_lag"]["batches"] == 3  # the probe pool ran asynchronously
    assert _measured_bytes(res) == _explained_bytes(graph, policy, 3)  # explain: what both pools sent
    torch.testing.assert_close(_params(loop), _params(local), rtol=1e-5, atol=1e-6)
    assert not torch.equal(versions[0], versions[-1])  # it learned
    loop.close(), local.close()


@pytest.mark.parametrize("probers, kind", [("replicated_rollout", "actor_pools"),
                                           ("async_replicated_rollout", "actor_pools"),
                                           ("env_calls", None)])
def test_which_executors_compose(tmp_path, probers, kind) -> None:
    """Two rollout groups are two pools even when they name the same executor; a pool beside
    an env-call group is refused in one line naming both."""
    from torchfrag.policies import PolicyError, load_policy_file

    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED.replace("executor: async_replicated_rollout", f"executor: {probers}"))
    policy, loop = load_policy_file(str(path)), CountedPoolsFactory()()
    graph = capture(loop)
    loop.close()
    if kind is not None:
        assert policy.place(graph).kind == kind
        return
    with pytest.raises(PolicyError, match="group 'probers' \\(executor env_calls\\) and group 'trainers' "
                                          "\\(executor replicated_rollout\\) cannot run in one placement") as err:
        policy.place(graph)  # before any process starts
    assert "\n" not in str(err.value)
