"""Distribution policies: placement, validation before any process starts, explain, configs."""
from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchfrag.fragments import Fragment, wrap
from torchfrag.graph import capture
from torchfrag.policies import (
    ActorsPolicy,
    DataParallelPolicy,
    PolicyError,
    SingleDevicePolicy,
    as_policy,
    explain,
)
from torchfrag.policies.factory import EnvSlice, PPOFactory, slice_seeds
from torchfrag.runtime import run

from _policy_helpers import CFG, children, params


@pytest.fixture
def graph():
    loop = PPOFactory("CartPole-v1", CFG)()
    yield capture(loop)
    loop.close()


def test_placement_roles(graph):
    pl = ActorsPolicy(actors=2).place(graph)
    assert pl.roles == {"rollout": "actor", "advantage": "learner", "learn": "learner"}
    assert ActorsPolicy(actors=2, advantage="on_arrival").place(graph).roles == pl.roles
    # GAE works on each env's trajectory alone: it may run on the actors with the rollout.
    pl = ActorsPolicy(actors=2, advantage="actors").place(graph)
    assert pl.roles == {"rollout": "actor", "advantage": "actor", "learn": "learner"}
    pl = ActorsPolicy(actors=2, advantage="actors", placement={"advantage": "learner"}).place(graph)
    assert pl.roles["advantage"] == "learner"
    with pytest.raises(PolicyError, match="advantage must be one of"):
        ActorsPolicy(actors=2, advantage="gpu").place(graph)
    # async actors keep the advantage on the learner (current critic, not the stale one).
    assert as_policy({"name": "async_actors"}).place(graph).roles["advantage"] == "learner"
    pl = as_policy("central_inference").place(graph)
    assert set(pl.roles.values()) == {"learner"}
    pl = DataParallelPolicy(workers=3).place(graph)
    assert set(pl.roles.values()) == {"replica"} and pl.workers("replica") == 3


@pytest.mark.parametrize("cfg, match", [
    ({"name": "actors", "actors": 1000}, "more than max_workers"),
    ({"name": "actors", "actors": 0}, "actors must be >= 1"),
    ({"name": "central_inference", "env_workers": 300, "max_workers": 1000}, "more than max_workers"),
    ({"name": "actors", "placement": {"nope": "actor"}}, "fragment 'nope', which is not in the captured graph"),
    ({"name": "actors", "placement": {"learn": "gpu_farm"}}, "unknown role 'gpu_farm'"),
    ({"name": "actors", "devices": {"learner": "cuda:7"}}, "not available|CUDA device"),
    ({"name": "actors", "devices": {"learner": "banana"}}, "is not a device"),
    ({"name": "actors", "actorz": 2}, "unknown option"),
    ({"name": "shard_everything"}, "unknown distribution policy"),
])
def test_bad_configs_fail_before_any_process(graph, cfg, match):
    before = len(children())
    with pytest.raises(PolicyError, match=match):
        run(graph, cfg, iterations=1, factory=PPOFactory("CartPole-v1", CFG))
    assert len(children()) == before


def test_per_env_chain_and_bad_actor_chain():
    from torchfrag.policies.base import per_env_chain

    loop = PPOFactory("CartPole-v1", {**CFG, "reward_scale": 0.1})()
    g = capture(loop)
    assert per_env_chain(g, "rollout") == ["scale", "advantage"]
    assert ActorsPolicy(actors=2, advantage="actors").place(g).nodes_of("actor") == \
        ["rollout", "scale", "advantage"]
    # The actors run the rollout and a prefix of the chain after it, nothing else.
    with pytest.raises(PolicyError, match="chain"):
        ActorsPolicy(actors=2, advantage="actors", placement={"scale": "learner"}).place(g)
    with pytest.raises(PolicyError, match="chain"):
        ActorsPolicy(actors=2, placement={"learn": "actor"}).place(g)
    with pytest.raises(PolicyError, match="chain"):
        ActorsPolicy(actors=2, placement={"rollout": "learner"}).place(g)
    loop.close()


def test_too_many_actors_for_envs(graph):
    # 4 envs cannot be split over 8 actors; checked on the driver before any process starts.
    before = len(children())
    with pytest.raises(PolicyError, match="only 4 envs"):
        run(graph, {"name": "actors", "actors": 8}, iterations=1, factory=PPOFactory("CartPole-v1", CFG))
    with pytest.raises(PolicyError, match="only 4 envs"):
        run(graph, {"name": "central_inference", "env_workers": 8}, iterations=1,
            factory=PPOFactory("CartPole-v1", CFG))
    assert len(children()) == before


def test_unpicklable_factory_fails_early(graph):
    with pytest.raises(PolicyError, match="cannot be pickled"):
        run(graph, "actors", iterations=1, factory=lambda env_slice=None: None)


def test_single_device_cuda_absent_or_runs(graph):
    if torch.cuda.is_available():
        pytest.skip("CUDA present: covered by the GPU run")
    with pytest.raises(PolicyError, match="CUDA is not available"):
        run(graph, SingleDevicePolicy(device_name="cuda"), iterations=1)


def test_single_device_cpu_fallback_equals_local(monkeypatch):
    # Build each loop right before its run: the factory seeds torch's global RNG, which the
    # learner's minibatch shuffling then draws from. CUDA is hidden so that the fallback is
    # taken on a GPU machine too (it once failed there, finding the GPU).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    f = PPOFactory("CartPole-v1", CFG, exploration="mode")
    a = f()
    run(capture(a), "local", iterations=2)
    b = f()
    res = run(capture(b), SingleDevicePolicy(device_name="cuda", fallback_cpu=True, compile=False),
              iterations=2)
    assert res.extra["device"] == "cpu"
    assert torch.equal(params(b), params(a))


def test_single_device_compile_path():
    # Compiled graphs reorder float operations: after 16 Adam steps the parameters
    # stay within 5e-3 of the eager run (stated tolerance), and are finite.
    f = PPOFactory("CartPole-v1", CFG, exploration="mode")
    a = f()
    run(capture(a), "local", iterations=2)
    b = f()
    res = run(capture(b), SingleDevicePolicy(device_name="cpu", compile=True,
                                             compile_backend="aot_eager"), iterations=2)
    assert res.iterations == 2 and torch.isfinite(params(b)).all()
    torch.testing.assert_close(params(b), params(a), rtol=0, atol=5e-3)


class _Merge(Fragment):
    """A user fragment taking two TensorDicts; records the devices it was given."""

    def __init__(self, by_keyword: bool) -> None:
        second = "other" if by_keyword else 1
        super().__init__(out_keys=["z"], arg_in_keys={0: ["y"], second: ["w"]})
        self.seen: list[tuple[object, object]] = []

    def forward(self, td, other=None):
        self.seen.append((td.device, other.device))
        return td.set("z", td["y"] + other["w"])


class _TwoInputLoop(nn.Module):
    def __init__(self, by_keyword: bool) -> None:
        super().__init__()
        self.f = wrap(TensorDictModule(nn.Linear(2, 2), ["x"], ["y"]))
        self.merge = _Merge(by_keyword)
        self.by_keyword = by_keyword

    def forward(self, td, other):
        if self.by_keyword:  # a Python constant: fx records only the branch taken
            return self.merge(self.f(td), other=other)
        return self.merge(self.f(td), other)


@pytest.mark.parametrize("by_keyword", [False, True])
def test_single_device_passes_every_tensordict_argument_moved(by_keyword):
    torch.manual_seed(0)
    loop = _TwoInputLoop(by_keyword)
    td = TensorDict(x=torch.randn(3, 2), batch_size=[3])
    other = TensorDict(w=torch.randn(3, 2), batch_size=[3])
    expected = loop(td.clone(), other=other.clone())["z"]
    # compile=True takes the device path even on the CPU (the "eager" backend keeps it fast)
    policy = SingleDevicePolicy(device_name="cpu", compile=True, compile_backend="eager")
    res = run(loop, policy, iterations=1, inputs=(td, other), in_keys={"td": ["x"], "other": ["w"]})
    assert res.extra["device"] == "cpu"
    torch.testing.assert_close(res.output["z"], expected)
    # both TensorDicts were moved to the policy's device (inputs built without one)
    assert loop.merge.seen[-1] == (torch.device("cpu"), torch.device("cpu"))


class _Act(Fragment):
    """A user act fragment calling a plain ``nn.Sequential`` actor on a tensor."""

    def __init__(self, actor: nn.Module) -> None:
        super().__init__(["observation"], ["action"], reads=actor)
        self.actor = actor

    def forward(self, td):
        return td.set("action", self.actor(td["observation"]))


class _Regress(Fragment):
    """A user learner: one Adam step pulling the actor's action towards ``target``."""

    impure = True
    passthrough = False

    def __init__(self, actor: nn.Module) -> None:
        super().__init__(["observation", "target"], ["loss"], owns=actor)
        self.actor = actor
        self.optimizer = torch.optim.Adam(actor.parameters(), lr=1e-2)

    def forward(self, td):
        loss = (self.actor(td["observation"]) - td["target"]).pow(2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return TensorDict(loss=loss.detach())


class _SequentialLoop(nn.Module):
    def __init__(self, wrapped: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.actor = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
        if wrapped:
            self.act = wrap(TensorDictModule(self.actor, ["observation"], ["action"]))
        else:
            self.act = _Act(self.actor)
        self.learn = _Regress(self.actor)

    def forward(self, td):
        return self.learn(self.act(td))


@pytest.mark.parametrize("wrapped", [False, True])
def test_single_device_compiles_a_sequential_actor(wrapped, caplog):
    # an nn.Sequential called by a user fragment, or inside a TensorDictModule: both compiled
    data = TensorDict(observation=torch.randn(8, 3), target=torch.randn(8, 1), batch_size=[8])
    eager = _SequentialLoop(wrapped)
    run(eager, "local", iterations=3, inputs=(data.clone(),), in_keys=["observation", "target"])
    graphs: list[str] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm.code)  # what torch.compile handed its backend
        return gm.forward

    loop = _SequentialLoop(wrapped)
    with caplog.at_level("INFO", logger="torchfrag.runtime.placed"):
        run(loop, SingleDevicePolicy(device_name="cpu", compile=True, compile_backend=backend),
            iterations=3, inputs=(data.clone(),), in_keys=["observation", "target"])
    assert "single_device compiles 1 networks (backend" in caplog.text and "Sequential" in caplog.text
    assert graphs and all("linear" in code and "tanh" in code for code in graphs)
    assert loop.actor._compiled_call_impl is None  # compilation undone after the run
    torch.testing.assert_close(params(loop), params(eager))


def test_slice_seeds_match_pool():
    from torchfrag.envs.pool import per_env_seeds

    assert slice_seeds(3, EnvSlice(1, 2, 4)) == per_env_seeds(3, 4)[1:3]
    full = PPOFactory("CartPole-v1", CFG)()
    part = PPOFactory("CartPole-v1", CFG)(EnvSlice(2, 2, 4))
    assert torch.equal(full.env.reset()["observation"][2:], part.env.reset()["observation"])
    assert torch.equal(params(full), params(part))
    full.close(), part.close()


@pytest.mark.parametrize("name", ["actors", "async_actors", "central_inference", "data_parallel"])
def test_explain(graph, name, tmp_path):
    text = explain(graph, name, path=str(tmp_path / "placed.png"), show=False)
    assert f"policy {name}" in text
    assert "edges crossing processes" in text
    assert (tmp_path / "placed.png").stat().st_size > 1000
    if name.endswith("actors"):
        assert "state" in text and "rollout@actor[2]" in text
    if name == "central_inference":
        assert "rollout.env_step" in text
    if name == "data_parallel":
        assert "gradients" in text


def test_explain_local(graph):
    assert "no edge crosses processes" in explain(graph, "local", show=False)


def test_hydra_configs_compose():
    from torchfrag.train import compose_config

    cfg = compose_config(["policy=actors", "policy.actors=4"])
    assert as_policy(cfg.policy).actors == 4
    for name in ["async_actors", "central_inference", "data_parallel", "single_device", "local"]:
        assert as_policy(compose_config([f"policy={name}"]).policy).name == name
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose_config(["policy=actors", "policy.actors=many"])
