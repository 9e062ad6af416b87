"""``multi_learner``: several learners, each with its own actors, gradients all-reduced among them.

The loops are the user loops of ``test_placement_engine`` (a REINFORCE loop with two user
fragments; its learner is not torchfrag's ``Learn``), plus a learner written here that reports
its parameters in its output, so that every learner's parameters can be compared after every
iteration (they come back stacked under ``"learners"``).
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from tensordict import TensorDictBase
from torch import nn

from torchfrag.graph import capture
from torchfrag.policies import MultiLearnerPolicy, PolicyError, as_policy, crossings, explain
from torchfrag.policies.factory import EnvSlice
from torchfrag.runtime import run

from _policy_helpers import children, wait_no_children
from test_placement_engine import DQNFactory, PolicyGradient, ReinforceFactory, _measured_bytes


def _params(loop: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in loop.parameters()])


class ReportingLearner(PolicyGradient):
    """The user's REINFORCE learner, with its parameters after the step in its output, and (when
    it runs among several learners) whether every learner holds the same parameters after it."""

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        import torch.distributed as dist

        out = super().forward(td)
        params = torch.cat([p.detach().reshape(-1) for p in self.actor.parameters()])
        out.set("params", params)
        if dist.is_initialized():  # the learners' process group (the actors are not in it)
            every = [torch.empty_like(params) for _ in range(dist.get_world_size())]
            dist.all_gather(every, params)
            out.set("learners_equal", torch.tensor(all(torch.equal(every[0], p) for p in every)))
            out.set("learners", torch.tensor(dist.get_world_size()))
        return out


@dataclass
class ReportingFactory(ReinforceFactory):
    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        loop = super().__call__(env_slice)
        loop.learn = ReportingLearner(loop.actor)
        return loop


def _run(factory, policy, iterations, hooks=()):
    loop = factory()
    res = run(capture(loop), policy, iterations=iterations, factory=factory, hooks=list(hooks))
    assert wait_no_children() == []
    return loop, res


def test_policy_shape():
    pol = as_policy({"name": "multi_learner", "learners": 3, "actors_per_learner": 2})
    assert isinstance(pol, MultiLearnerPolicy) and pol.num_workers == 2 + 6
    loop = ReinforceFactory()()
    g = capture(loop)
    placement = pol.place(g)
    assert placement.kind == "replicated_learners"
    assert placement.roles == {"rollout": "actor", "returns": "learner", "learn": "learner"}
    assert placement.workers("learner") == 3 and placement.workers("actor") == 6
    text = explain(g, pol, show=False)
    assert "driver + 2 worker(s)" in text and "gradients" in text and "learner[3]" in text
    loop.close()


@pytest.mark.parametrize("bad, match", [({"learners": 0}, "learners must be an integer >= 1, got 0"),
                                        ({"actors_per_learner": -1}, "actors_per_learner must be"),
                                        ({"backend": "tcp"}, "unknown backend 'tcp'"),
                                        ({"advantage": "gpu"}, "advantage must be one of")])
def test_bad_settings_refused_before_any_process(bad, match):
    loop = ReinforceFactory()()
    before = len(children())
    with pytest.raises(PolicyError, match=match):
        run(capture(loop), {"name": "multi_learner", **bad}, iterations=1, factory=ReinforceFactory())
    assert len(children()) == before
    loop.close()


def test_refused_without_gradient_hook_before_any_process():
    class NoHook(PolicyGradient):
        def has_gradient_sync(self) -> bool:
            return False

    loop = ReinforceFactory()()
    loop.learn = NoHook(loop.actor)
    before = len(children())
    with pytest.raises(PolicyError, match="gradient sync"):
        run(capture(loop), "multi_learner", iterations=1, factory=ReinforceFactory())
    assert len(children()) == before
    # too few envs for a learner's actors: refused before any process as well
    with pytest.raises(PolicyError, match="5 actors per learner but the loop has only 4 envs"):
        run(capture(ReinforceFactory()()), {"name": "multi_learner", "actors_per_learner": 5}, iterations=1,
            factory=ReinforceFactory())
    assert len(children()) == before
    loop.close()


def test_one_learner_equals_actors():
    f = ReportingFactory(exploration="mode")
    a, _ = _run(f, {"name": "actors", "actors": 2}, 3)
    m, res = _run(f, {"name": "multi_learner", "learners": 1, "actors_per_learner": 2}, 3)
    assert torch.equal(_params(m), _params(a))
    local = f()
    run(capture(local), "local", iterations=3)
    torch.testing.assert_close(_params(m), _params(local), rtol=1e-5, atol=1e-6)
    assert m.rollout.frames == a.rollout.frames == 3 * 4 * 32
    assert len(res.extra["learner_outputs"]) == 1 and int(res.output["learners"]) == 1
    for x in (a, m, local):
        x.close()


def _assert_explained_exactly(cross, res) -> None:
    """explain's bytes are the bytes counted at run time, exactly: the actors' RPC traffic of every
    learner, and each rank's all-reduced gradients (every optimizer step of the iteration)."""
    comm = res.extra["comm"]
    assert sum(c.bytes for c in cross if c.kind != "gradients") == comm["bytes"], comm
    assert sum(c.bytes for c in cross if c.kind == "gradients") == comm["allreduce_bytes"], comm
    assert _measured_bytes(res) == res.iterations * sum(c.bytes for c in cross) + sum(c.once for c in cross)


def test_learners_identical_after_every_iteration_and_explain_bytes():
    f = ReportingFactory(num_envs=4, steps=16)
    seen: list[torch.Tensor] = []

    def hook(i, out, graph):
        assert int(out["learners"]) == 2 and bool(out["learners_equal"])  # after every iteration
        seen.append(out["params"].clone())

    pol = {"name": "multi_learner", "learners": 2, "actors_per_learner": 2}
    loop, res = _run(f, pol, 3, [hook])
    assert len(seen) == 3
    assert not torch.equal(seen[0], seen[-1])  # and they did learn
    outs = res.extra["learner_outputs"]  # every learner's output of the last iteration
    assert len(outs) == 2 and torch.equal(outs[0]["params"], outs[1]["params"])
    assert torch.equal(outs[1]["params"], _params(loop.actor))
    # every learner's frames: 2 learners x 4 envs x 16 steps per iteration
    assert loop.rollout.frames == 3 * 2 * 4 * 16
    # explain: the actors' traffic of every learner, and the learners' all-reduce
    other = f()
    cross = crossings(as_policy(pol).place(capture(other)))
    other.close()
    _assert_explained_exactly(cross, res)
    loop.close()


def test_replicated_envs_two_learners_equal_local():
    """Same envs and seeds on both learners: the mean of two equal gradients is that gradient."""
    f = ReportingFactory(exploration="mode")
    m, _ = _run(f, {"name": "multi_learner", "learners": 2, "actors_per_learner": 2,
                    "replicate_envs": True}, 3)
    local = f()
    run(capture(local), "local", iterations=3)
    torch.testing.assert_close(_params(m), _params(local), rtol=1e-5, atol=1e-6)
    m.close(), local.close()


@pytest.mark.slow
def test_reinforce_learns_cartpole_with_two_learners():
    f = ReinforceFactory(num_envs=8, steps=64)
    loop = f()
    res = run(capture(loop), {"name": "multi_learner", "learners": 2, "actors_per_learner": 1},
              iterations=30, factory=f)
    assert wait_no_children() == []
    returns = loop.rollout.stats.returns  # the driver's actors' episodes
    late = returns[-20:]
    assert res.iterations == 30 and sum(late) / len(late) > 60.0, sum(late) / len(late)
    loop.close()


def test_explain_bytes_with_ppo_learn():
    """torchfrag's own Learn (several minibatch steps per iteration, clipping after the average)."""
    from torchfrag.policies import PPOFactory

    cfg = {"num_envs": 4, "steps": 16, "minibatch_size": 32, "epochs": 2, "reward_scale": 0.1}
    f = PPOFactory("CartPole-v1", cfg)
    pol = {"name": "multi_learner", "learners": 2, "actors_per_learner": 2, "advantage": "actors"}
    loop = f()
    g = capture(loop)
    cross = crossings(as_policy(pol).place(g))
    assert [c.kind for c in cross].count("gradients") == 1
    res = run(g, pol, iterations=3, factory=f)
    assert wait_no_children() == []
    _assert_explained_exactly(cross, res)
    assert res.extra["comm"]["allreduce_calls"] == 4  # 2 epochs x 2 minibatches, each all-reduced
    assert loop.rollout.frames == 3 * 2 * 4 * 16
    loop.close()


def test_failing_actor_of_another_learner_is_reported():
    """worker3 is learner 1's actor: its error reaches the driver through learner 1 (worker1)."""
    import time

    from torchfrag.runtime.launcher import WorkerError

    from _policy_helpers import CFG, FaultyFactory

    f = FaultyFactory("CartPole-v1", CFG, fault="raise", worker=3, at=2)
    loop = f()
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match="(?s)worker1.*injected fault"):
        run(capture(loop), {"name": "multi_learner", "learners": 2, "actors_per_learner": 1, "timeout": 10.0},
            iterations=3, factory=f)
    assert time.monotonic() - t0 < 90
    assert wait_no_children() == []
    loop.close()


ML_NORM = {"name": "multi_learner", "learners": 2, "actors_per_learner": 1}
#: learner 1 is worker1; learner 0's actor is worker2, learner 1's worker3 (learner_layout)
ML_WORKERS = {"workers": ("worker2", "worker3"), "learners": ("worker1",)}


def test_obs_norm_statistics_merged_over_learners():
    """Exact, after every iteration: every learner folds its actors' running statistics in, then
    the learners merge theirs; the driver's statistics and learner 1's are those recomputed from
    every observation both learners' actors' envs produced (test_placement_engine's check)."""
    from test_placement_engine import _checked_obs_norm_run

    _checked_obs_norm_run(ML_NORM, 3, **ML_WORKERS)


def test_obs_norm_merge_losing_a_learner_is_caught(monkeypatch):
    """Negative control: a driver that takes part in the learners' merge but keeps its own
    statistics (learner 1's actors' observations lost) fails the check."""
    from torchfrag.runtime.replicated_learners import LearnerActors
    from torchfrag.runtime.state_sync import allreduce_produced
    from test_placement_engine import _checked_obs_norm_run

    def keeps_its_own(self, frag, base):
        mine = {k: v.detach().clone() for k, v in frag.produced_state().items()}
        allreduce_produced(frag, base)  # still paired with learner 1's collective
        frag.load_produced_state(mine)

    monkeypatch.setattr(LearnerActors, "reduce_produced", keeps_its_own)
    with pytest.raises(AssertionError, match="driver's count after iteration 0"):
        _checked_obs_norm_run(ML_NORM, 1, **ML_WORKERS)


def test_dqn_user_loop_epsilon_reaches_the_learners_actors():
    """The user epsilon buffer, decayed by the driver's learner, is what its actors act with (the
    other learner runs the same executor code on its own actors)."""
    loop, res = _run(DQNFactory(), {"name": "multi_learner", "learners": 2, "actors_per_learner": 1}, 4)
    seen = loop.decay.seen
    assert len(seen) == 4 and seen[-1][1] < 0.5
    for acted, own in seen:
        assert acted == pytest.approx(own)
    assert loop.rollout.frames == 4 * 2 * 4 * 8  # both learners' actors
    assert len(res.extra["learner_outputs"]) == 2
    loop.close()
