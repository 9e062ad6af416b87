"""State produced where the data is, merged exactly under every policy (issue 25, defects 1, 2, 3, 6).

The loops, fragments and counters are written here as a user would: a frame counter (an
int64 buffer incremented in ``forward``), a running-mean normaliser (count, sum and sum of
squares, merged by adding increments), a TorchRL transform counting the env's frames, and a
collection-only loop. After every iteration the driver's state must equal the exact total
(or ``local``'s), and the state the workers run with must be the driver's.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.envs import Transform, TransformedEnv

from torchfrag.fragments import Fragment, Rollout
from torchfrag.graph import capture
from torchfrag.policies import as_policy
from torchfrag.policies.factory import EnvSlice
from torchfrag.runtime import run

from _policy_helpers import wait_no_children
from test_placement_engine import EvalFactory, PolicyGradient, ReinforceLoop, ReturnToGo, _env

ENVS, STEPS = 4, 16
FRAMES = ENVS * STEPS  # per iteration of one loop


class FrameCounter(Fragment):
    """Counts the frames that pass (an int64 buffer), and writes the count it started from."""

    per_env = True

    def __init__(self) -> None:
        super().__init__([("next", "reward")], ["counter_seen"])
        self.register_buffer("frames", torch.zeros((), dtype=torch.int64))

    def produced_state(self) -> dict[str, torch.Tensor]:
        return {"frames": self.frames}

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        td.set("counter_seen", self.frames.expand(td.shape).clone())
        self.frames += td.numel()
        return td


class RunningNorm(Fragment):
    """Normalises observations by the statistics of the frames seen before this batch, then adds it."""

    per_env = True

    def __init__(self) -> None:
        super().__init__(["observation"], ["observation_normed"])
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.register_buffer("total", torch.zeros(4, dtype=torch.float64))
        self.register_buffer("squares", torch.zeros(4, dtype=torch.float64))

    def produced_state(self) -> dict[str, torch.Tensor]:
        return {"count": self.count, "total": self.total, "squares": self.squares}

    def merge_produced_state(self, base: dict[str, torch.Tensor],
                             replicas: Sequence[dict[str, torch.Tensor]]) -> None:
        # Sums, not means: every replica's increment counts.
        self.load_produced_state({k: base[k] + sum(r[k] - base[k] for r in replicas) for k in base})

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        obs = td.get("observation").double().reshape(-1, 4)
        n = max(int(self.count), 1)
        mean = self.total / n
        std = (self.squares / n - mean**2).clamp_min(1e-8).sqrt()
        td.set("observation_normed", ((td.get("observation") - mean.float()) / std.float()))
        self.count += obs.shape[0]
        self.total += obs.sum(0)
        self.squares += (obs**2).sum(0)
        return td


class RecordingLearn(PolicyGradient):
    """The user's learner, which also records the counter values its batch was produced from."""

    def __init__(self, actor: nn.Module) -> None:
        super().__init__(actor)
        self.seen: list[list[int]] = []

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        self.seen.append(sorted({int(v) for v in td.get("counter_seen").reshape(-1)}))
        return super().forward(td)


class CountedLoop(ReinforceLoop):
    """REINFORCE with the counter and the normaliser chained after the rollout (per env)."""

    def __init__(self, env, steps: int, exploration: str) -> None:
        super().__init__(env, steps, exploration)
        self.counter = FrameCounter()
        self.norm = RunningNorm()
        self.learn = RecordingLearn(self.actor)

    def forward(self) -> TensorDictBase:
        return self.learn(self.returns(self.norm(self.counter(self.rollout()))))


@dataclass
class CountedFactory:
    seed: int = 0
    exploration: str = "mode"

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        return CountedLoop(_env(ENVS, self.seed, env_slice), STEPS, self.exploration)


def _norm_state(loop: CountedLoop) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in loop.norm.produced_state().items()}


def _check_counts(loop: CountedLoop, i: int, per_iteration: int = FRAMES) -> None:
    """The driver's counters hold every frame of iterations 0..i, once."""
    total = (i + 1) * per_iteration
    assert loop.rollout.frames == total
    assert int(loop.counter.frames) == total, (i, int(loop.counter.frames), total)
    assert int(loop.norm.count) == total, (i, int(loop.norm.count), total)


def _run_checked(policy, iterations: int, check, factory=None) -> nn.Module:
    """Runs ``factory``'s loop (default: :class:`CountedFactory`) under ``policy``, calling
    ``check(loop, i)`` after every iteration; no process may be left behind."""
    factory = factory or CountedFactory()
    loop = factory()
    run(capture(loop), policy, iterations=iterations, factory=factory,
        hooks=[lambda i, _out, _g: check(loop, i)])
    assert wait_no_children() == []
    return loop


def _copied(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in state.items()}


def worker_state(nodes: list[str]) -> dict[str, dict[str, torch.Tensor]]:
    """On a worker: the shared state (parameters, buffers, produced state) of its loop's ``nodes``."""
    from torchfrag.runtime.worker import WORKER

    loop = WORKER["loop"]
    return {n: _copied(loop.get_submodule(n).shared_state()) for n in nodes}


class ActorsAgree:
    """A check, after every iteration, that the actors ran with the driver's state and gave theirs back.

    For every actor (worker name -> the nodes it runs): each parameter and buffer of its
    fragments equals the driver's at the start of the iteration (what the request carried; the
    learner steps after), and the driver's produced state is its start plus every actor's
    increment, exactly (the fragments here merge by adding increments). A stale actor, or a
    merge that loses or double-counts an increment, fails it.

    Args:
        factory: The run's factory; a fresh loop of it (seeded) holds the state the driver's
            loop starts from.
        workers: Worker name -> the nodes it runs.
    """

    def __init__(self, factory: Any, workers: dict[str, list[str]]) -> None:
        self.workers = workers
        fresh = factory()
        self.start = self._driver(fresh)
        fresh.close()
        self.checked = 0

    def _driver(self, loop: nn.Module) -> dict[str, dict[str, torch.Tensor]]:
        nodes = {n for chain in self.workers.values() for n in chain}
        return {n: _copied(loop.get_submodule(n).shared_state()) for n in nodes}

    def __call__(self, loop: nn.Module, i: int) -> None:
        from torch.distributed import rpc

        now = self._driver(loop)
        added: dict[tuple[str, str], torch.Tensor] = {}
        for worker, chain in self.workers.items():
            theirs = rpc.rpc_sync(worker, worker_state, args=(chain,))
            for node in chain:
                assert theirs[node].keys() == self.start[node].keys(), (worker, node)
                for key, start in self.start[node].items():
                    got = theirs[node][key]
                    if key.startswith("produced."):
                        added[node, key] = added.get((node, key), 0) + (got - start)
                    else:
                        assert torch.equal(got, start), f"iteration {i}: {worker} ran {node}.{key} stale"
        for (node, key), increment in added.items():
            expected = self.start[node][key] + increment
            torch.testing.assert_close(now[node][key], expected, rtol=1e-12, atol=1e-9,
                                       msg=f"iteration {i}: {node}.{key} is not the sum of the actors' increments")
        self.start = now
        self.checked += 1


def _local_states(iterations: int) -> list[dict[str, torch.Tensor]]:
    loop = CountedFactory()()
    states: list[dict[str, torch.Tensor]] = []
    run(capture(loop), "local", iterations=iterations, hooks=[lambda i, _o, _g: states.append(_norm_state(loop))])
    loop.close()
    return states


ACTORS = {"name": "actors", "advantage": "actors"}


def test_actors_merge_equals_local_and_actors_run_with_the_drivers_state() -> None:
    """Sync actors: exact counts, the normaliser's statistics equal local's, and every actor's
    chain started from the driver's state of the iteration before."""
    iterations = 3
    local = _local_states(iterations)

    def check(loop: CountedLoop, i: int) -> None:
        _check_counts(loop, i)
        assert loop.learn.seen[-1] == [i * FRAMES]  # both actors started from the driver's count
        mine = _norm_state(loop)
        for key, value in local[i].items():
            torch.testing.assert_close(mine[key], value, rtol=1e-12, atol=1e-9)

    _run_checked(ACTORS, iterations, check).close()


@pytest.mark.parametrize("policy", [{**ACTORS, "sync_every": 2},
                                    {**ACTORS, "name": "async_actors", "staleness": 10, "prefetch": 2}])
def test_delayed_and_async_syncs_merge_exactly(policy) -> None:
    """Actors that started from an older version still add exactly what they produced (the old
    merge, relative to the driver's current state, counted 512, 0, 1536, -1024, ...)."""
    history = [0]

    def check(loop: CountedLoop, i: int) -> None:
        _check_counts(loop, i)
        history.append(int(loop.counter.frames))
        seen = loop.learn.seen[-1]
        if policy["name"] == "async_actors":  # each batch came from a version the driver had
            assert set(seen) <= set(history[:-1]), (seen, history)
        elif i % 2 == 0:  # a sync iteration: the driver's state of the iteration before
            assert seen == [history[-2]]

    _run_checked(policy, 4, check).close()


def test_multi_learner_merges_every_learners_state_each_iteration() -> None:
    """Two learners, each with its own actor running the counter and the normaliser: after every
    iteration the driver holds every frame of both learners' actors once, and its actor started
    the iteration from that merged state (the other learner's frames included)."""
    def check(loop: CountedLoop, i: int) -> None:
        _check_counts(loop, i, per_iteration=2 * FRAMES)
        assert loop.learn.seen[-1] == [i * 2 * FRAMES]

    policy = {"name": "multi_learner", "learners": 2, "actors_per_learner": 1, "advantage": "actors"}
    _run_checked(policy, 3, check).close()


def test_negative_control_detects_stale_actor_state() -> None:
    """With sync_every=2 the actors keep their own state between syncs: the check that actors
    run with the driver's state must catch it."""
    def check(loop: CountedLoop, i: int) -> None:
        assert loop.learn.seen[-1] == [i * FRAMES]

    with pytest.raises(AssertionError):
        _run_checked({**ACTORS, "sync_every": 2}, 2, check)
    assert wait_no_children() == []


def test_negative_control_detects_a_merge_that_loses_increments(monkeypatch) -> None:
    """A merge that keeps one actor's state (last writer wins) loses the other's frames."""
    def last_wins(self, base, replicas):
        self.load_produced_state(replicas[-1])

    monkeypatch.setattr(FrameCounter, "merge_produced_state", last_wins)
    with pytest.raises(AssertionError):
        _run_checked(ACTORS, 2, _check_counts)
    assert wait_no_children() == []


# ------------------------------------------------------------------------------------------
# collection-only: a rollout and a user fragment, no learner
class CollectLoop(nn.Module):
    def __init__(self, env) -> None:
        super().__init__()
        self.env = env
        self.actor = ReinforceLoop(env, STEPS, "random").actor
        self.rollout = Rollout(self.actor, env, steps=STEPS)
        self.counter = FrameCounter()

    def forward(self) -> TensorDictBase:
        return self.counter(self.rollout())

    def close(self) -> None:
        self.env.close()


@dataclass
class CollectFactory:
    seed: int = 0

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        return CollectLoop(_env(ENVS, self.seed, env_slice))


@pytest.mark.parametrize("name", ["actors", "async_actors"])
def test_collection_only_loop_runs_on_the_actors(name) -> None:
    f = CollectFactory()
    loop = f()
    g = capture(loop)
    policy = {"name": name, "advantage": "actors"}
    placement = as_policy(policy).place(g)
    assert placement.roles == {"rollout": "actor", "counter": "actor"}
    assert placement.kind.endswith("replicated_rollout")

    def check(i: int, out: TensorDictBase, _g) -> None:
        assert out.batch_size == torch.Size([ENVS, STEPS])  # the actors' batches, gathered
        assert int(loop.counter.frames) == loop.rollout.frames == (i + 1) * FRAMES

    res = run(g, policy, iterations=3, factory=f, hooks=[check])
    assert wait_no_children() == [] and res.iterations == 3
    loop.close()


# ------------------------------------------------------------------------------------------
# central_inference: the state of the env's transforms belongs to the driver
class CountSteps(Transform):
    """A user transform that counts the frames its env steps (an int64 buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("frames", torch.zeros((), dtype=torch.int64))

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        self.frames += next_tensordict.numel()
        return next_tensordict


@dataclass
class TransformFactory:
    seed: int = 0

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        return ReinforceLoop(TransformedEnv(_env(ENVS, self.seed, env_slice), CountSteps()), STEPS, "mode")


def _env_frames(state: dict[str, torch.Tensor]) -> int:
    (value,) = [v for k, v in state.items() if k.endswith("frames")]
    return int(value)


def _worker_env_frames() -> int:
    """On an env worker: the frames its rollout's transform has counted."""
    from torchfrag.runtime.worker import WORKER

    return _env_frames(WORKER["fragment"].produced_state())


def test_central_inference_env_state_is_the_drivers() -> None:
    from torch.distributed import rpc

    f = TransformFactory()
    local = f()
    expected: list[int] = []
    run(capture(local), "local", iterations=3,
        hooks=[lambda i, _o, _g: expected.append(_env_frames(local.rollout.produced_state()))])
    assert expected == [FRAMES, 2 * FRAMES, 3 * FRAMES]
    loop = f()

    def check(i: int, _out, _g) -> None:
        driver = _env_frames(loop.rollout.produced_state())
        assert driver == expected[i]  # it was 0: the env workers kept counts of their own
        for w in ("worker1", "worker2"):
            # each worker stepped from the driver's state; the other's last step is merged since
            assert rpc.rpc_sync(w, _worker_env_frames) == driver - ENVS // 2

    run(capture(loop), "central_inference", iterations=3, factory=f, hooks=[check])
    assert wait_no_children() == []
    loop.close(), local.close()


# ------------------------------------------------------------------------------------------
# data_parallel: every replica's statistics merged over the ranks; frames per rollout
def _replica_state() -> dict[str, torch.Tensor]:
    """On a data_parallel replica: its counter's and normaliser's state."""
    from torchfrag.runtime.worker import WORKER

    loop = WORKER["loop"]
    return {"frames": loop.counter.frames.clone(), **_norm_state(loop)}


def test_data_parallel_replicas_share_their_statistics() -> None:
    from torch.distributed import rpc

    def check(loop: CountedLoop, i: int) -> None:
        _check_counts(loop, i, per_iteration=2 * FRAMES)  # two replicas, each on its own envs
        other = rpc.rpc_sync("worker1", _replica_state)
        assert int(other["frames"]) == int(loop.counter.frames)
        for key, value in _norm_state(loop).items():
            assert torch.equal(other[key], value), key

    _run_checked("data_parallel", 3, check).close()


def test_data_parallel_counts_each_rollouts_frames() -> None:
    f = EvalFactory(steps=STEPS)
    loop = f()
    run(capture(loop), "data_parallel", iterations=3, factory=f)
    assert wait_no_children() == []
    # Two replicas, each running the training rollout (4 envs x 16) and the evaluation (2 x 8).
    assert loop.rollout.frames == 2 * 3 * FRAMES
    assert loop.evaluate.frames == 2 * 3 * 2 * 8
    loop.close()
