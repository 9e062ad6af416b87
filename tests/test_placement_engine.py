"""The placement engine with loops, fragments and policies written here, as a user would.

Two user loops run unchanged under every shipped policy: a REINFORCE loop (a per-env
return fragment and a learner fragment owning its optimizer) and a DQN-style loop (a
user epsilon-greedy explorer whose epsilon is a buffer, a user decay fragment, a TorchRL
replay buffer and a user Q-learner). The tests check what crosses processes: every
tensor of state (buffers too), state produced on the actors merged back, refusals before
any process starts.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import Transform, VecNormV2
from torchrl.modules import ProbabilisticActor

from torchfrag.fragments import Fragment, ReplaySample, ReplayWrite, Rollout
from torchfrag.graph import capture
from torchfrag.policies import ActorsPolicy, PolicyError, as_policy, explain, register_policy
from torchfrag.policies.factory import EnvSlice, PPOFactory, slice_seeds
from torchfrag.runtime import run

from _policy_helpers import children, wait_no_children

GAMMA = 0.99
DISTRIBUTED = ["actors", "async_actors", "central_inference", "data_parallel"]


def _env(num_envs: int, seed: int, env_slice: EnvSlice | None):
    from torchfrag.algos.ppo import make_env

    if env_slice is None:
        return make_env("CartPole-v1", num_envs, seed=seed)
    return make_env("CartPole-v1", env_slice.count, seed=slice_seeds(seed, env_slice))


# ------------------------------------------------------------------------------------------
# REINFORCE: two user fragments
class ReturnToGo(Fragment):
    """Discounted return of every step, each env's trajectory alone (so: per env)."""

    per_env = True

    def __init__(self) -> None:
        super().__init__([("next", "reward"), ("next", "done")], ["return"])

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        reward = td.get(("next", "reward")).squeeze(-1)
        done = td.get(("next", "done")).squeeze(-1).float()
        ret = torch.zeros_like(reward)
        acc = torch.zeros_like(reward[:, 0])
        for t in range(reward.shape[1] - 1, -1, -1):
            acc = reward[:, t] + GAMMA * acc * (1.0 - done[:, t])
            ret[:, t] = acc
        return td.set("return", ret)


class PolicyGradient(Fragment):
    """A learner that is not torchfrag's Learn: it owns its optimizer (default gradient-sync hook)."""

    impure = True
    passthrough = False

    def __init__(self, actor: nn.Module, lr: float = 1e-2) -> None:
        super().__init__(["observation", "action", "return"], ["loss"], owns=actor)
        self.actor = actor
        self.optimizer = torch.optim.Adam(actor.parameters(), lr=lr)

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        td = td.reshape(-1)
        ret = td.get("return")
        adv = (ret - ret.mean()) / (ret.std() + 1e-8)
        dist = self.actor.get_dist(td.select("observation"))
        loss = -(dist.log_prob(td.get("action")) * adv).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return TensorDict(loss=loss.detach())


class ReinforceLoop(nn.Module):
    def __init__(self, env, steps: int, exploration: str) -> None:
        super().__init__()
        self.env = env
        net = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))
        self.actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["logits"]), in_keys=["logits"],
                                        distribution_class=torch.distributions.Categorical,
                                        return_log_prob=False)
        self.rollout = Rollout(self.actor, env, steps=steps, exploration=exploration)
        self.returns = ReturnToGo()
        self.learn = PolicyGradient(self.actor)

    def forward(self) -> TensorDictBase:
        return self.learn(self.returns(self.rollout()))

    def close(self) -> None:
        self.env.close()


@dataclass
class ReinforceFactory:
    num_envs: int = 4
    steps: int = 32
    seed: int = 0
    exploration: str = "random"

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        return ReinforceLoop(_env(self.num_envs, self.seed, env_slice), self.steps, self.exploration)


# ------------------------------------------------------------------------------------------
# DQN-style: user explorer (epsilon buffer), user decay fragment, replay buffer, user learner
class Explorer(TensorDictModuleBase):
    """Epsilon-greedy over ``action`` with ``eps`` a buffer; writes the epsilon it used."""

    def __init__(self, eps: float = 1.0) -> None:
        super().__init__()
        self.in_keys = ["action"]
        self.out_keys = ["action", "eps"]
        self.register_buffer("eps", torch.tensor(float(eps)))

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        action = td.get("action")
        explore = torch.rand(action.shape) < self.eps
        td.set("action", torch.where(explore, torch.randint(0, 2, action.shape), action))
        return td.set("eps", self.eps.expand(action.shape).clone())


class Greedy(TensorDictModuleBase):
    def __init__(self, qnet: nn.Module) -> None:
        super().__init__()
        self.qnet = qnet
        self.in_keys = ["observation"]
        self.out_keys = ["action"]

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        return td.set("action", self.qnet(td.get("observation")).argmax(-1))


class DecayEpsilon(Fragment):
    """Multiplies the explorer's epsilon after every batch; records (epsilon acted with, own epsilon)."""

    impure = True

    def __init__(self, explorer: Explorer, factor: float = 0.7, floor: float = 0.05) -> None:
        super().__init__(["eps"], [], owns=explorer)
        self.__dict__["explorer"] = explorer
        self.factor, self.floor = factor, floor
        self.seen: list[tuple[float, float]] = []

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        self.seen.append((float(td.get("eps").mean()), float(self.explorer.eps)))
        self.explorer.eps.mul_(self.factor).clamp_(min=self.floor)
        return td


class QLearn(Fragment):
    """Q-learning steps on ``updates`` minibatches of the sample; a target network copied every
    ``target_every`` calls (0: bootstrap from the online network)."""

    impure = True
    passthrough = False

    def __init__(self, qnet: nn.Module, lr: float = 1e-3, updates: int = 1, target_every: int = 0) -> None:
        super().__init__(["observation", "action", ("next", "reward"), ("next", "terminated"),
                          ("next", "observation")], ["loss"], owns=qnet)
        self.qnet = qnet
        self.optimizer = torch.optim.Adam(qnet.parameters(), lr=lr)
        self.updates, self.target_every, self.calls = updates, target_every, 0
        self.__dict__["target"] = copy.deepcopy(qnet) if target_every else qnet

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        for mb in td.reshape(-1).chunk(self.updates):
            q = self.qnet(mb.get("observation")).gather(-1, mb.get("action").unsqueeze(-1)).squeeze(-1)
            with torch.no_grad():
                nxt = self.target(mb.get(("next", "observation"))).max(-1).values
                target = mb.get(("next", "reward")).squeeze(-1) + GAMMA * nxt * (
                    1.0 - mb.get(("next", "terminated")).squeeze(-1).float())
            loss = nn.functional.smooth_l1_loss(q, target)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        self.calls += 1
        if self.target_every and self.calls % self.target_every == 0:
            self.target.load_state_dict(self.qnet.state_dict())
        return TensorDict(loss=loss.detach())


_KEYS = ["observation", "action", ("next", "reward"), ("next", "terminated"), ("next", "observation"), "eps"]


class EpsilonDQNLoop(nn.Module):
    def __init__(self, env, steps: int, updates: int = 1, target_every: int = 0, factor: float = 0.7,
                 lr: float = 1e-3) -> None:
        super().__init__()
        self.env = env
        self.qnet = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))
        self.explorer = Explorer()
        self.rollout = Rollout(TensorDictSequential(Greedy(self.qnet), self.explorer), env, steps=steps)
        self.decay = DecayEpsilon(self.explorer, factor=factor)
        self.buffer = ReplayBuffer(storage=LazyTensorStorage(10_000))
        self.write = ReplayWrite(self.buffer, in_keys=_KEYS)
        self.sample = ReplaySample(self.buffer, batch_size=64 * updates, out_keys=_KEYS)
        self.learn = QLearn(self.qnet, lr=lr, updates=updates, target_every=target_every)

    def forward(self) -> TensorDictBase:
        batch = self.decay(self.rollout())
        return self.learn(self.sample(self.write(batch.select(*_KEYS))))

    def close(self) -> None:
        self.env.close()


@dataclass
class DQNFactory:
    num_envs: int = 4
    steps: int = 8
    seed: int = 0
    updates: int = 1
    target_every: int = 0
    factor: float = 0.7
    lr: float = 1e-3

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        return EpsilonDQNLoop(_env(self.num_envs, self.seed, env_slice), self.steps, self.updates,
                              self.target_every, self.factor, self.lr)


def _params(loop: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in loop.parameters()])


def _run(factory, policy, iterations):
    loop = factory()
    res = run(capture(loop), policy, iterations=iterations, factory=factory)
    assert wait_no_children() == []
    return loop, res


# ------------------------------------------------------------------------------------------
def test_declarations_not_names():
    loop = ReinforceFactory()()
    g = capture(loop)
    assert g.fragment("returns").tags() == {"per_env"}
    assert "optimizer" in g.fragment("learn").tags() and "rollout" in g.fragment("rollout").tags()
    # The user's per-env fragment follows the rollout onto the actors (no class-name list).
    assert ActorsPolicy(actors=2, advantage="actors").place(g).roles == {
        "rollout": "actor", "returns": "actor", "learn": "learner"}
    # A user class that happens to be called RewardScale is not per-env unless it says so.
    RewardScale = type("RewardScale", (ReturnToGo,), {"per_env": False})  # noqa: N806
    assert not RewardScale().per_env
    loop.close()


@pytest.mark.parametrize("policy", [*DISTRIBUTED, {"name": "single_device", "device_name": "cpu",
                                                   "compile": False}])
def test_user_loops_run_unchanged(policy):
    loop, res = _run(ReinforceFactory(num_envs=4, steps=16), policy, 2)
    assert res.iterations == 2 and math.isfinite(float(res.output["loss"]))
    assert loop.rollout.frames == 2 * 4 * 16 * (2 if as_policy(policy).name == "data_parallel" else 1)
    loop.close()
    loop, res = _run(DQNFactory(), policy, 3)
    assert res.iterations == 3 and math.isfinite(float(res.output["loss"]))
    loop.close()


@pytest.mark.parametrize("policy", ["actors", "central_inference"])
def test_deterministic_user_loop_equals_local(policy):
    f = ReinforceFactory(exploration="mode")
    local = f()
    run(capture(local), "local", iterations=3)
    placed, _ = _run(f, policy, 3)
    torch.testing.assert_close(_params(placed), _params(local), rtol=1e-5, atol=1e-6)
    local.close(), placed.close()


@pytest.mark.parametrize("policy", ["actors", "async_actors"])
def test_epsilon_buffer_reaches_the_actors(policy):
    loop, _ = _run(DQNFactory(), {"name": policy, "staleness": 0} if policy == "async_actors" else policy, 4)
    seen = loop.decay.seen
    assert len(seen) == 4
    for acted, own in seen:  # the actors acted with the learner's current epsilon
        assert acted == pytest.approx(own)
    assert seen[-1][1] < 0.5  # and it did decay (1.0 * 0.7 ** 3)
    loop.close()


class SeenObservations(Transform):
    """Keeps every observation batch that reaches the transforms after it: env steps and resets
    (a partial reset passes the whole batch, and the normaliser counts all of its rows)."""

    def __init__(self) -> None:
        super().__init__(in_keys=["observation"])
        self.seen: list[torch.Tensor] = []

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        self.seen.append(next_tensordict.get("observation").detach().clone())
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        self.seen.append(tensordict_reset.get("observation").detach().clone())
        return tensordict_reset


def _seen_of(env) -> SeenObservations:
    return next(t for t in env.transform if isinstance(t, SeenObservations))


@dataclass
class RecordingPPOFactory(PPOFactory):
    """The shipped PPO with observation normalisation, recording what its normaliser sees.

    The normaliser takes means over counts (``decay=1``): its statistics are then the mean and
    mean square of every observation it saw, whatever order the workers' parts are merged in.
    """

    def make_env(self, cfg, num_envs, seed):
        env = super().make_env(cfg, num_envs, seed)
        (i,) = [i for i, t in enumerate(env.transform) if isinstance(t, VecNormV2)]
        env.transform[i].decay = 1.0
        env.transform.insert(i, SeenObservations())
        return env


def _take_seen() -> list[torch.Tensor]:
    """On a worker: the observation batches its rollout's env produced since the last call."""
    from torchfrag.runtime.worker import WORKER

    rec = _seen_of(WORKER["fragment"].env)
    out, rec.seen = rec.seen, []
    return out


def _recomputed(batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """count, loc (mean) and var (mean square) of every row of ``batches``, in float64."""
    rows = torch.cat([b.reshape(-1, b.shape[-1]) for b in batches]).double()
    return {"count": torch.tensor(rows.shape[0]), "loc": rows.mean(0), "var": rows.pow(2).mean(0)}


def _driver_moments(loop) -> dict[str, torch.Tensor]:
    state = loop.rollout.produced_state()
    return {name: next(v for k, v in state.items() if f"/{name}." in k) for name in ("count", "loc", "var")}


def _learner_moments() -> dict[str, torch.Tensor]:
    """On a learner worker (``multi_learner``): its own loop's normaliser statistics."""
    from torchfrag.runtime.worker import WORKER

    return {k: v.clone() for k, v in _driver_moments(WORKER["loop"]).items()}


def _checked_obs_norm_run(policy, iterations: int, workers: Sequence[str] = ("worker1", "worker2"),
                          learners: Sequence[str] = ()) -> None:
    """Runs the recording PPO under ``policy``; after every iteration, the driver's statistics
    (and those of every learner worker in ``learners``) must equal those recomputed from every
    observation the env-stepping ``workers`` produced so far."""
    from torch.distributed import rpc

    f = RecordingPPOFactory("CartPole-v1", {"num_envs": 4, "steps": 16, "minibatch_size": 32, "epochs": 1,
                                            "obs_norm": True}, exploration="mode")
    loop = f()
    seen: list[torch.Tensor] = []

    def check(i, _out, _g) -> None:
        for w in workers:
            seen.extend(rpc.rpc_sync(w, _take_seen))
        want = _recomputed(seen)
        for who, have in [("driver", _driver_moments(loop))] + [(w, rpc.rpc_sync(w, _learner_moments))
                                                                for w in learners]:
            got, expected = int(have["count"]), int(want["count"])
            assert got == expected, f"{who}'s count after iteration {i}: {got} != {expected}"
            for key in ("loc", "var"):
                torch.testing.assert_close(have[key].double(), want[key], rtol=1e-5, atol=1e-8,
                                           msg=f"{who}'s {key} at {i}")

    try:
        run(capture(loop), policy, iterations=iterations, factory=f, hooks=[check])
    finally:
        assert wait_no_children() == []
        assert _seen_of(loop.rollout.env).seen == []  # the driver's env stepped nothing itself
        loop.close()


@pytest.mark.parametrize("policy", [{"name": "actors", "actors": 2},
                                    {"name": "central_inference", "env_workers": 2}], ids=lambda p: p["name"])
def test_obs_norm_statistics_merged_back(policy):
    """Exact: the driver's normaliser statistics are those of every observation the workers saw."""
    _checked_obs_norm_run(policy, 3)


def test_obs_norm_stale_merge_is_caught(monkeypatch):
    """Negative control: a merge that folds the workers' statistics in one iteration late fails."""
    from torchfrag.runtime.executor import RpcExecutor

    merge = RpcExecutor.merge_produced

    def one_iteration_late(self, produced):
        previous, self.late = getattr(self, "late", []), list(produced)
        merge(self, previous)

    monkeypatch.setattr(RpcExecutor, "merge_produced", one_iteration_late)
    with pytest.raises(AssertionError, match="count"):
        _checked_obs_norm_run({"name": "actors", "actors": 2}, 1)


def test_data_parallel_refused_without_gradient_hook():
    class NoHook(PolicyGradient):
        def has_gradient_sync(self) -> bool:
            return False

    loop = ReinforceFactory()()
    loop.learn = NoHook(loop.actor)
    before = len(children())
    with pytest.raises(PolicyError, match="gradient sync"):
        run(capture(loop), "data_parallel", iterations=1, factory=ReinforceFactory())
    assert len(children()) == before
    loop.close()


def test_explain_is_pure():
    loop = ReinforceFactory()()
    g = capture(loop)
    state = torch.random.get_rng_state()
    before = {k: v.clone() for k, v in loop.state_dict().items()}
    for name in ["local", *DISTRIBUTED]:
        explain(g, name, show=False)
    assert torch.equal(state, torch.random.get_rng_state())
    assert all(torch.equal(before[k], v) for k, v in loop.state_dict().items())
    loop.close()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["local", *DISTRIBUTED, {"name": "single_device", "device_name": "cpu",
                                                              "compile": False}])
def test_reinforce_learns_cartpole(policy):
    f = ReinforceFactory(num_envs=8, steps=64)
    loop = f()
    res = run(capture(loop), policy, iterations=40, factory=f)
    returns = loop.rollout.stats.returns
    assert res.iterations == 40
    late = returns[-20:]
    assert sum(late) / len(late) > 60.0, sum(late) / len(late)
    loop.close()


# ------------------------------------------------------------------------------------------
# user policies: a registered class and a YAML file in the user's own config folder
@register_policy
@dataclass
class ReturnsOnActors(ActorsPolicy):
    """Every per-env fragment goes with the rollout to the actors (by declaration, not name)."""

    name: str = "returns_on_actors_test"

    def _default_role(self, graph, node):
        frag = graph.fragment(node)
        return "actor" if frag.role == "rollout" or frag.per_env else "learner"


USER_YAML = """\
defaults:
  - actors_schema
name: my_actors
kind: actors
actors: 2
rules:
  - {tag: per_env, role: actor}
"""


@pytest.mark.parametrize("how", ["class", "yaml"])
def test_user_policy_runs_and_explains(how, tmp_path):
    if how == "class":
        policy = "returns_on_actors_test"
    else:
        from torchfrag.train import compose_config

        (tmp_path / "policy").mkdir()
        (tmp_path / "policy" / "my_actors.yaml").write_text(USER_YAML)
        policy = compose_config([f"hydra.searchpath=[file://{tmp_path}]", "policy=my_actors"]).policy
        assert as_policy(str(tmp_path / "policy" / "my_actors.yaml")).rules == [{"tag": "per_env",
                                                                                 "role": "actor"}]
    f = ReinforceFactory(exploration="mode")
    loop = f()
    g = capture(loop)
    assert as_policy(policy).place(g).roles == {"rollout": "actor", "returns": "actor", "learn": "learner"}
    text = explain(g, policy, show=False)
    assert "returns@actor[2]" in text and "state" in text
    local = f()
    run(capture(local), "local", iterations=2)
    res = run(g, policy, iterations=2, factory=f)
    assert wait_no_children() == [] and res.extra["policy"] == as_policy(policy).name
    torch.testing.assert_close(_params(loop), _params(local), rtol=1e-5, atol=1e-6)
    loop.close(), local.close()


def test_bad_rule_refused():
    with pytest.raises(PolicyError, match="exactly one of"):
        as_policy({"name": "actors", "rules": [{"tag": "per_env", "node": "x", "role": "actor"}]}).validate()
    with pytest.raises(PolicyError, match="unknown role"):
        as_policy({"name": "actors", "rules": [{"tag": "per_env", "role": "gpu"}]}).validate()
    with pytest.raises(PolicyError, match="kind"):
        as_policy({"name": "brand_new"})


# ------------------------------------------------------------------------------------------
# the factory contract, checked before any worker exists
@dataclass
class IgnoresSlice(ReinforceFactory):
    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        return super().__call__(None)


@dataclass
class NoSlice:
    def __call__(self) -> nn.Module:
        return ReinforceFactory()()


@pytest.mark.parametrize("factory, match", [(IgnoresSlice(), "ignores its env slice"),
                                            (NoSlice(), "must take the env slice")])
@pytest.mark.parametrize("policy", ["actors", "central_inference", "data_parallel"])
def test_factory_contract_refused_before_any_process(factory, match, policy):
    loop = ReinforceFactory()()
    before = len(children())
    if policy == "data_parallel" and isinstance(factory, IgnoresSlice):
        match = "ignores its env slice|"  # a replica's slice is the whole loop's size: nothing to see
    if match.endswith("|"):
        run(capture(loop), policy, iterations=1, factory=factory)
        assert wait_no_children() == []
    else:
        with pytest.raises(PolicyError, match=match):
            run(capture(loop), policy, iterations=1, factory=factory)
        assert len(children()) == before
    loop.close()


# ------------------------------------------------------------------------------------------
# explain's bytes against the executor's counters
def _explained_bytes(graph, policy, iterations: int) -> int:
    from torchfrag.policies import crossings

    cross = crossings(as_policy(policy).place(graph))
    return iterations * sum(c.bytes for c in cross) + sum(c.once for c in cross)


def _measured_bytes(res) -> int:
    """RPC tensor bytes both ways, and the gradient bytes each rank all-reduced."""
    total = res.extra["comm_total"]
    reduced = res.extra["comm"].get("allreduce_bytes", 0.0) * res.iterations
    return total.bytes_sent + total.bytes_received + int(round(reduced))


PPO_CFG = {"num_envs": 4, "steps": 16, "minibatch_size": 32, "epochs": 2, "reward_scale": 0.1}
DQN_CFG = {"num_envs": 4, "steps": 8, "updates": 2, "batch_size": 16, "learning_starts": 64}


@pytest.mark.parametrize("algo, policy", [
    ("ppo", "actors"), ("ppo", {"name": "actors", "advantage": "actors"}),
    ("ppo", {"name": "async_actors", "staleness": 100}), ("ppo", "central_inference"), ("ppo", "data_parallel"),
    ("dqn", "data_parallel"),  # two optimizer steps an iteration, each all-reduced
    ("ppo_obs_norm", "central_inference"),  # env-transform state to every env worker, deltas back
])
def test_explain_bytes_match_measured(algo, policy):
    from torchfrag.policies.factory import AlgoFactory

    cfg = {"ppo": PPO_CFG, "dqn": DQN_CFG, "ppo_obs_norm": {**PPO_CFG, "obs_norm": True}}[algo]
    f = AlgoFactory("CartPole-v1", cfg, algo=algo.split("_")[0])
    loop = f()
    g = capture(loop)
    predicted = _explained_bytes(g, policy, 3)
    res = run(g, policy, iterations=3, factory=f)
    assert wait_no_children() == []
    assert _measured_bytes(res) == predicted
    loop.close()


# ------------------------------------------------------------------------------------------
# runtime leftovers: timeouts that cannot fire, fewer frames than asked
@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), 0.0])
def test_timeout_must_be_finite(timeout):
    loop = ReinforceFactory()()
    before = len(children())
    with pytest.raises(PolicyError, match="timeout must be a finite number"):
        run(capture(loop), {"name": "actors", "timeout": timeout}, iterations=1, factory=ReinforceFactory())
    assert len(children()) == before
    loop.close()


def test_continue_reports_missing_frames(caplog):
    from _policy_helpers import CFG, FaultyFactory

    f = FaultyFactory("CartPole-v1", CFG, fault="raise", worker=1, at=2)
    loop = f()
    res = run(capture(loop), {"name": "actors", "actors": 2, "on_failure": "continue"}, iterations=3, factory=f)
    assert wait_no_children() == []
    # worker 1 fails at its first env step: every iteration has worker 2's 2 envs x 16 steps of 64.
    assert res.extra["failed"] == ["worker1"] and res.extra["frames_missing"] == 3 * 32
    assert "fewer than asked" in caplog.text
    loop.close()


# ------------------------------------------------------------------------------------------
# two rollouts: training on the actors, evaluation on the driver
class WithEvaluation(ReinforceLoop):
    def __init__(self, env, eval_env, steps: int, exploration: str) -> None:
        super().__init__(env, steps, exploration)
        self.eval_env = eval_env
        self.evaluate = Rollout(self.actor, eval_env, steps=8, exploration="mode")

    def forward(self) -> TensorDictBase:
        metrics = self.learn(self.returns(self.rollout()))
        self.evaluate()
        return metrics

    def close(self) -> None:
        super().close()
        self.eval_env.close()


@dataclass
class EvalFactory(ReinforceFactory):
    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        torch.manual_seed(self.seed)
        return WithEvaluation(_env(self.num_envs, self.seed, env_slice), _env(2, 123, None), self.steps,
                              self.exploration)


def test_training_rollout_on_actors_evaluation_on_driver():
    f = EvalFactory(exploration="mode", steps=16)
    local = f()
    run(capture(local), "local", iterations=3)
    loop = f()
    g = capture(loop)
    assert ActorsPolicy(actors=2).place(g).roles == {"rollout": "actor", "returns": "learner",
                                                     "learn": "learner", "evaluate": "learner"}
    run(g, "actors", iterations=3, factory=f)
    assert wait_no_children() == []
    assert loop.rollout.frames == 3 * 4 * 16 and loop.evaluate.frames == 3 * 2 * 8
    torch.testing.assert_close(_params(loop), _params(local), rtol=1e-5, atol=1e-6)
    # the driver's evaluation ran with the same (learner) weights as local's
    assert loop.evaluate.stats.returns == pytest.approx(local.evaluate.stats.returns, rel=1e-5)
    # and the evaluation rollout may be the one placed on the actors instead
    assert ActorsPolicy(actors=2, placement={"evaluate": "actor"}).place(g).roles["rollout"] == "learner"
    loop.close(), local.close()


# ------------------------------------------------------------------------------------------
# sockets: every listening socket of the run is on the configured address
@pytest.mark.parametrize("policy", ["actors", "data_parallel"])
def test_sockets_bound_to_master_addr_only(policy):
    import psutil

    listening: set[tuple[int, str]] = set()

    def inspect(i, out, graph):
        for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
            try:
                for c in proc.net_connections(kind="inet"):
                    if c.status == psutil.CONN_LISTEN:
                        listening.add((proc.pid, c.laddr.ip))
            except psutil.Error:
                pass

    f = ReinforceFactory()
    loop = f()
    run(capture(loop), policy, iterations=1, factory=f, hooks=[inspect])
    assert wait_no_children() == []
    pids = {pid for pid, _ in listening}
    assert len(pids) == 3 if policy == "actors" else len(pids) == 2  # driver and every worker listen
    assert {ip for _, ip in listening} == {"127.0.0.1"}, listening
    loop.close()


def test_normal_shutdown_prints_no_tensorpipe_noise():
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, 'tests')\n"
            "from test_placement_engine import ReinforceFactory\n"
            "from torchfrag.graph import capture\nfrom torchfrag.runtime import run\n"
            "if __name__ == '__main__':\n"
            "    f = ReinforceFactory(); loop = f()\n"
            "    run(capture(loop), 'actors', iterations=1, factory=f)\n"
            "    print('done')\n")
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "done" in out.stdout, out.stderr[-3000:]
    assert "pipe closed" not in out.stderr and "EOF" not in out.stderr, out.stderr[-3000:]
    # torch's init_rpc-internal deprecation warning (one per process) is not the user's either
    assert "as a ProcessGroup" not in out.stderr, out.stderr[-3000:]


def test_worker_stopped_during_startup_honours_timeout():
    import os
    import signal
    import subprocess
    import sys
    import time

    code = ("import sys, time; sys.path.insert(0, 'tests')\n"
            "from test_placement_engine import ReinforceFactory\n"
            "from torchfrag.graph import capture\nfrom torchfrag.runtime import run\n"
            "from torchfrag.runtime.launcher import WorkerTimeout\n"
            "if __name__ == '__main__':\n"
            "    f = ReinforceFactory(); loop = f(); t0 = time.monotonic()\n"
            "    try:\n"
            "        run(capture(loop), {'name': 'actors', 'timeout': 5.0}, iterations=1, factory=f)\n"
            "    except WorkerTimeout as err:\n"
            "        print('timeout', round(time.monotonic() - t0), err)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    import psutil

    deadline = time.monotonic() + 60
    kids: list = []
    while time.monotonic() < deadline and not kids:
        kids = []
        for c in psutil.Process(proc.pid).children():
            with __import__("contextlib").suppress(psutil.Error):
                if "spawn_main" in " ".join(c.cmdline()):
                    kids.append(c)
        time.sleep(0.05)
    assert kids, "no worker was spawned"
    time.sleep(2.0)  # stopped in the middle of its start-up (importing torch, joining RPC)
    os.kill(kids[0].pid, signal.SIGSTOP)
    try:
        out, _ = proc.communicate(timeout=80)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    finally:
        for k in kids:
            with __import__("contextlib").suppress(Exception):
                os.kill(k.pid, signal.SIGKILL)
    line = next((ln for ln in out.splitlines() if ln.startswith("timeout")), None)
    assert line is not None and "is stopped" in line, out[-2000:]
    assert int(line.split()[1]) < 40  # policy.timeout (5 s) after it stopped, not the 90 s allowance


def test_devices_per_role_reach_the_workers():
    from torchfrag.runtime.worker import worker_extra

    loop = ReinforceFactory()()
    g = capture(loop)
    policy = as_policy({"name": "actors", "devices": {"learner": "cpu", "actor": "cpu"}})
    placement = policy.place(g)
    ex = type("Ex", (), {"policy": policy, "factory": ReinforceFactory(),
                         "option": lambda self, key, default=None: placement.option(key, default)})()
    assert worker_extra(ex, placement)["device"] == "cpu"
    assert "actor" in explain(g, policy, show=False)
    with pytest.raises(PolicyError, match="devices names role 'env'"):
        as_policy({"name": "actors", "devices": {"env": "cpu"}}).place(g)
    res = run(g, policy, iterations=1, factory=ReinforceFactory())
    assert wait_no_children() == [] and res.iterations == 1
    loop.close()


# ------------------------------------------------------------------------------------------
# the DQN-style user loop learns under every policy; the shipped dqn keeps its actors' epsilon
LEARNING_DQN = DQNFactory(num_envs=16, steps=8, updates=16, target_every=10, factor=0.97)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["local", *DISTRIBUTED, {"name": "single_device", "device_name": "cpu",
                                                              "compile": False}])
def test_dqn_user_loop_learns_cartpole(policy):
    """Epsilon decay (a user fragment writing a buffer), replay, a user Q-learner with a target net.

    ``local`` reaches a mean return of 92-249 over the last 20 episodes after 400 iterations
    (seeds 0-2); a random policy gets ~22, the untrained greedy one ~10.
    """
    f = LEARNING_DQN
    loop = f()
    res = run(capture(loop), policy, iterations=400, factory=f)
    assert wait_no_children() == [] and res.iterations == 400
    late = loop.rollout.stats.returns[-20:]
    assert sum(late) / len(late) > 50.0, (sum(late) / len(late), loop.rollout.stats.returns[-60:])
    seen = loop.decay.seen
    assert seen[-1][1] == pytest.approx(0.05)  # the learner's epsilon decayed to its floor
    if as_policy(policy).name != "async_actors":  # (async: the actors act up to `staleness` versions late)
        assert all(acted == pytest.approx(own) for acted, own in seen)
    loop.close()


class RecordEps(TensorDictModuleBase):
    """Writes the epsilon the acting process holds into every step (observation only)."""

    def __init__(self, egreedy: nn.Module) -> None:
        super().__init__()
        self.__dict__["egreedy"] = egreedy  # not a child: the shipped policy already holds it
        self.in_keys, self.out_keys = ["action"], ["eps_used"]

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        return td.set("eps_used", self.egreedy.eps.expand(td.batch_size).clone())


@dataclass
class ObservedDQN:
    """The shipped dqn, with its rollout writing the acting epsilon and its Anneal recording it."""

    cfg: dict

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        from torchfrag.algos.factory import AlgoFactory
        from torchfrag.algos.fragments import Anneal

        class RecordingAnneal(Anneal):
            def forward(self, td: TensorDictBase) -> TensorDictBase:
                self.seen.append((float(td.get("eps_used").float().mean()), float(self.module.eps)))
                return super().forward(td)

        loop = AlgoFactory("CartPole-v1", self.cfg, algo="dqn")(env_slice)
        loop.rollout = Rollout(TensorDictSequential(loop.policy, RecordEps(loop.egreedy)), loop.env,
                               steps=loop.cfg.steps)
        loop.explore = RecordingAnneal(loop.egreedy)
        loop.explore.seen = []
        return loop


def test_shipped_dqn_actors_act_with_the_learners_epsilon():
    cfg = {"num_envs": 4, "steps": 8, "learning_starts": 32, "batch_size": 16, "total_frames": 400,
           "exploration_fraction": 0.5}
    f = ObservedDQN(cfg)
    loop = f()
    run(capture(loop), "actors", iterations=5, factory=f)
    assert wait_no_children() == []
    seen = loop.explore.seen
    assert len(seen) == 5 and seen[0][1] == pytest.approx(1.0) and seen[-1][1] < 0.5  # it anneals
    for acted, own in seen:  # every actor acted with the learner's epsilon of that iteration
        assert acted == pytest.approx(own, abs=1e-6)
    loop.close()
