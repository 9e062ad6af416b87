"""capture(): nodes, edges, key sets, impurity, refusals, equality with eager execution."""
from __future__ import annotations

import inspect
import os
import shutil

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchfrag import capture
from torchfrag.algos.ppo import PPOConfig, make_ppo
from torchfrag.fragments import Fragment, wrap
from torchfrag.graph import CaptureError, FragmentGraph, MissingKeyError
from torchfrag.runtime import run

SMALL = PPOConfig(num_envs=4, steps=16, epochs=2, minibatch_size=32, total_frames=640)


@pytest.fixture
def ppo():
    loop = make_ppo("CartPole-v1", SMALL, seed=0)
    yield loop
    loop.close()


def _line_of(func, text: str) -> int:
    lines, start = inspect.getsourcelines(func)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(text)


def _lin(i: str, o: str, n_in: int = 2, n_out: int = 2) -> Fragment:
    return wrap(TensorDictModule(nn.Linear(n_in, n_out), [i], [o]))


# -- the PPO loop -------------------------------------------------------------------------
def test_ppo_capture_nodes_and_impurity(ppo):
    g = capture(ppo)
    assert isinstance(g, FragmentGraph)
    assert [n.name for n in g.nodes] == ["rollout", "advantage", "learn"]
    assert {n.name: n.impure for n in g.nodes} == {"rollout": True, "advantage": False, "learn": True}
    assert g.impure_nodes == ["rollout", "learn"]
    assert g.node("rollout").kind.startswith("Rollout(PoolEnv")
    assert g.node("learn").kind == "Learn(ClipPPOObjective)"


def test_ppo_capture_key_sets_and_edges(ppo):
    g = capture(ppo)
    adv = g.node("advantage")
    assert set(adv.in_keys) == {("observation",), ("next", "reward"), ("next", "done"),
                                ("next", "terminated"), ("next", "observation")}
    assert set(adv.out_keys) == {("advantage",), ("value_target",)}
    learn = g.node("learn")
    assert set(learn.in_keys) == {("observation",), ("action",), ("action_log_prob",),
                                  ("advantage",), ("value_target",)}
    assert {"loss_objective", "loss_critic", "loss_entropy", "grad_norm", "lr"} <= {
        k[0] for k in learn.out_keys}
    edges = {(e.src, e.dst): set(e.keys) for e in g.edges}
    assert set(edges) == {("rollout", "advantage"), ("rollout", "learn"), ("advantage", "learn")}
    assert edges[("advantage", "learn")] == {"advantage", "value_target"}
    assert edges[("rollout", "learn")] == {"observation", "action", "action_log_prob"}
    assert edges[("rollout", "advantage")] == {"observation", "next.reward", "next.done",
                                                "next.terminated", "next.observation"}
    # inputs follow the TensorDict actually passed
    assert g.node("learn").inputs == ("advantage",)


def test_ppo_capture_shared_parameter_edges(ppo):
    g = capture(ppo)
    weights = {(e.src, e.dst): e for e in g.shared if e.kind == "weights"}
    assert set(weights) == {("learn", "rollout"), ("learn", "advantage")}
    assert weights[("learn", "rollout")].numel == sum(p.numel() for p in ppo.actor.parameters())
    assert weights[("learn", "advantage")].numel == sum(p.numel() for p in ppo.critic.parameters())


def test_ppo_rollout_body_is_captured(ppo):
    g = capture(ppo)
    body = g.subgraphs["rollout"]
    assert [n.name for n in body.nodes] == ["act", "env_step"]
    assert [n.impure for n in body.nodes] == [False, True]
    assert body.edges[0].src == "input:carry" and body.edges[0].keys == ("observation",)
    assert ("act", "env_step", ("action",)) in {(e.src, e.dst, e.keys) for e in body.edges}


def test_reward_scale_variant_adds_a_node():
    loop = make_ppo("Pendulum-v1", PPOConfig(num_envs=2, steps=4, minibatch_size=8,
                                             reward_scale=0.1), seed=0)
    g = capture(loop)
    assert [n.name for n in g.nodes] == ["rollout", "scale", "advantage", "learn"]
    assert g.node("scale").in_keys == (("next", "reward"),)
    loop.close()


def test_graph_equals_eager_bit_for_bit():
    eager = make_ppo("CartPole-v1", SMALL, seed=7)
    eager_metrics = [eager() for _ in range(3)]
    graphed = make_ppo("CartPole-v1", SMALL, seed=7)
    outs = []
    run(capture(graphed), iterations=3, hooks=[lambda i, out, g: outs.append(out)])
    for a, b in zip(eager.state_dict().values(), graphed.state_dict().values()):
        assert torch.equal(a, b)
    for m1, m2 in zip(eager_metrics, outs):
        assert set(m1.keys()) == set(m2.keys())
        for k in m1.keys():
            assert torch.equal(m1[k], m2[k]), k
    eager.close()
    graphed.close()


def test_print_dot_render(ppo, tmp_path):
    g = capture(ppo)
    text = str(g)
    assert "rollout" in text and "Learn(ClipPPOObjective)" in text and "impure" in text
    assert "weights" in text and "subgraph of rollout" in text
    dot = g.to_dot()
    assert dot.startswith('digraph "PPOLoop"') and '"rollout" -> "advantage"' in dot
    assert "cluster_rollout" in dot
    png = g.render(str(tmp_path / "loop.png"))
    assert os.path.getsize(png) > 1000
    # graphviz is optional: without `dot` the same call falls back to matplotlib
    out = g.render(str(tmp_path / "loop_dot.png"), engine="dot")
    assert os.path.getsize(out) > 100
    if shutil.which("dot") is None:
        with open(out, "rb") as f:
            assert f.read(4) == b"\x89PNG"


def test_split_into_partitions(ppo):
    g = capture(ppo)
    split = g.split({"rollout": 0, "advantage": 1, "learn": 1})
    names = {n for n, _ in split.named_children()}
    assert {"submod_0", "submod_1"} <= names
    out = split()
    assert "loss_objective" in out.keys()


# -- key checks and dead-code elimination --------------------------------------------------
class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = _lin("x", "y")
        self.g = _lin("y", "z")

    def forward(self, td):
        td = self.f(td)
        return self.g(td)


def test_inputs_supply_keys():
    g = capture(Chain(), in_keys=["x"])
    assert [(e.src, e.dst, e.keys) for e in g.edges] == [("input:td", "f", ("x",)), ("f", "g", ("y",))]
    td = TensorDict(x=torch.ones(3, 2), batch_size=[3])
    assert g(td)["z"].shape == (3, 2)


def test_missing_key_is_refused():
    with pytest.raises(MissingKeyError) as err:
        capture(Chain(), in_keys=["w"])
    msg = str(err.value)
    assert "fragment 'f' reads key 'x'" in msg and "capture(loop, in_keys=" in msg
    assert f":{_line_of(Chain.forward, 'td = self.f(td)')}:" in msg


def test_dead_code_elimination_keeps_impure_nodes():
    class Tick(Fragment):
        impure = True

        def __init__(self):
            super().__init__(["x"], [])
            self.count = 0

        def forward(self, td):
            self.count += 1
            return td

    class Loop(nn.Module):
        def __init__(self):
            super().__init__()
            self.tick = Tick()
            self.unused = _lin("x", "u")
            self.f = _lin("x", "y")

        def forward(self, td):
            self.tick(td.select("x"))
            self.unused(td.select("x"))
            return self.f(td)

    g = capture(Loop(), in_keys=["x"])
    assert g.eliminate_dead_code() == ["unused"]
    assert [n.name for n in g.nodes] == ["tick", "f"]
    g(TensorDict(x=torch.ones(1, 2), batch_size=[1]))
    assert g.fragment("tick").count == 1


# -- refusals ------------------------------------------------------------------------------
class ControlFlow(Chain):
    def forward(self, td):
        td = self.f(td)
        if td["y"].sum() > 0:
            td = self.g(td)
        return td


class Iterates(Chain):
    def forward(self, td):
        td = self.f(td)
        for key in td["y"]:
            td = self.g(td)
        return td


class BuildsTD(Chain):
    def forward(self, td):
        td = self.f(td)
        new = TensorDict({"y": td["y"]}, batch_size=[3])
        return self.g(new)


class SetsItem(Chain):
    def forward(self, td):
        td = self.f(td)
        td["y"] = td["x"]
        return self.g(td)


class CallsSet(Chain):
    def forward(self, td):
        td = self.f(td)
        td.set("w", td["y"])
        return self.g(td)


class DiscardsResult(Chain):
    def forward(self, td):
        self.f(td)
        return self.g(td)


class Computes(Chain):
    def forward(self, td):
        td = self.f(td)
        y = td["y"] * 2
        return self.g(td), y


@pytest.mark.parametrize("loop_cls, line_text, words", [
    (ControlFlow, 'if td["y"].sum() > 0:', ["control flow", "Rollout", "Fragment subclass"]),
    (Iterates, 'for key in td["y"]:', ["iterating over a traced value", "Fragment subclass"]),
    (BuildsTD, "new = TensorDict(", ["constructing a TensorDict from traced values",
                                     "inside a fragment's forward"]),
    (SetsItem, 'td["y"] = td["x"]', ["in-place write td['y']", "td = self.frag(td)"]),
    (CallsSet, 'td.set("w"', ["in-place method .set()", "rebind its result"]),
    (DiscardsResult, "self.f(td)", ["is discarded", "used again", "rebind the result: `td = self.f(td)`"]),
    (Computes, 'y = td["y"] * 2', ["only fragment calls may appear", "move this computation into a Fragment"]),
])
def test_refusals_name_line_and_fix(loop_cls, line_text, words):
    with pytest.raises(CaptureError) as err:
        capture(loop_cls(), in_keys=["x"])
    msg = str(err.value)
    for w in words:
        assert w in msg, (w, msg)
    line = _line_of(loop_cls.forward, line_text)
    assert f"{__file__}:{line}:" in msg, msg
    assert "fix:" in msg


# -- fragments taking several TensorDicts (issue 25, defect 5) ----------------------------
class Score(Fragment):
    """A user fragment: ``value`` from its first TensorDict, ``target`` from its second."""

    passthrough = True

    def __init__(self, declared: bool = True, arg_in_keys=None):
        if declared:
            super().__init__(out_keys=["error"], arg_in_keys=arg_in_keys or [["value"], ["target"]])
        else:
            super().__init__(["value", "target"], ["error"])

    def forward(self, pred, ref):
        return pred.set("error", pred["value"] - ref["target"])


class TwoInputs(nn.Module):
    """A loop with two TensorDict inputs: predictions from ``obs``, targets from ``batch``."""

    def __init__(self, declared: bool = True):
        super().__init__()
        self.critic = _lin("obs", "value", n_out=1)
        self.targets = _lin("reward", "target", n_in=1, n_out=1)
        self.score = Score(declared)

    def forward(self, obs, batch):
        pred = self.critic(obs)
        ref = self.targets(batch)
        return self.score(pred, ref)


def _two_inputs(n: int = 3) -> tuple[TensorDict, TensorDict]:
    return (TensorDict(obs=torch.randn(n, 2), batch_size=[n]),
            TensorDict(reward=torch.randn(n, 1), batch_size=[n]))


@pytest.mark.parametrize("declared", [True, False])
def test_every_tensordict_argument_is_a_data_edge(declared):
    g = capture(TwoInputs(declared), in_keys={"obs": ["obs"], "batch": ["reward"]})
    into_score = {(e.src, e.keys) for e in g.edges if e.dst == "score"}
    assert into_score == {("critic", ("value",)), ("targets", ("target",))}
    assert g.node("score").inputs == ("critic", "targets")
    obs, batch = _two_inputs()
    out = g(obs, batch)
    expected = out["value"] - g.fragment("targets")(batch.clone())["target"]
    torch.testing.assert_close(out["error"], expected)


def test_missing_key_of_the_second_tensordict_is_refused_at_capture():
    class Loop(TwoInputs):
        def forward(self, obs, batch):
            pred = self.critic(obs)
            return self.score(pred, batch)  # batch holds `reward`, not `target`

    with pytest.raises(MissingKeyError) as err:
        capture(Loop(), in_keys={"obs": ["obs"], "batch": ["reward"]})
    msg = str(err.value)
    assert "fragment 'score' reads key 'target' from argument 1 (batch)" in msg, msg
    assert "available: reward" in msg and "arg_in_keys" in msg
    assert f":{_line_of(Loop.forward, 'return self.score(pred, batch)')}:" in msg


def test_undeclared_keys_are_checked_against_all_tensordict_arguments():
    class Loop(TwoInputs):
        def forward(self, obs, batch):
            return self.score(self.critic(obs), batch)

    with pytest.raises(MissingKeyError,
                       match="reads key 'target' from any of its TensorDict arguments"):
        capture(Loop(declared=False), in_keys={"obs": ["obs"], "batch": ["reward"]})
    # a key the second argument supplies is found there (it used to be looked up in the first only)
    g = capture(Loop(declared=False), in_keys={"obs": ["obs"], "batch": ["target"]})
    assert {(e.src, e.keys) for e in g.edges if e.dst == "score"} == {
        ("critic", ("value",)), ("input:batch", ("target",))}


def test_keyword_tensordict_argument_is_checked():
    class Loop(TwoInputs):
        def __init__(self):
            super().__init__()
            self.score = Score(arg_in_keys={0: ["value"], "ref": ["target"]})

        def forward(self, obs, batch):
            return self.score(self.critic(obs), ref=batch)

    g = capture(Loop(), in_keys={"obs": ["obs"], "batch": ["target"]})
    assert ("input:batch", "score", ("target",)) in [(e.src, e.dst, e.keys) for e in g.edges]
    with pytest.raises(MissingKeyError,
                       match=r"reads key 'target' from keyword argument 'ref' \(batch\)"):
        capture(Loop(), in_keys={"obs": ["obs"], "batch": ["reward"]})


def test_declared_argument_that_is_not_passed_is_refused():
    class Loop(TwoInputs):
        def forward(self, obs, batch):
            return self.score(self.critic(obs))

    with pytest.raises(CaptureError, match=r"declares keys for arguments \[1\] in arg_in_keys"):
        capture(Loop(), in_keys={"obs": ["obs"], "batch": ["reward"]})
