"""Shipped policies are data: their placement is the ``base_rules`` of their YAML file.

The classes only validate the shape of what the rules produce; a user changes the
placement of a shipped policy by editing (a copy of) its YAML, with the same schema.
"""
from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from torchfrag.graph import capture
from torchfrag.policies import POLICY_CLASSES, Policy, PolicyError, as_policy
from torchfrag.policies.rules import shipped_rules

from test_placement_engine import DQNFactory, EvalFactory, ReinforceFactory

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "policy")
SHIPPED = ["local", "actors", "async_actors", "central_inference", "data_parallel", "multi_learner",
           "single_device"]


@pytest.fixture(scope="module")
def graph():
    loop = ReinforceFactory()()
    yield capture(loop)
    loop.close()


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_placement_is_the_yaml(name):
    cls = POLICY_CLASSES[name]
    assert cls.__module__ == "torchfrag.policies.base"
    # no Python placement left in the shipped classes: only shape checks
    assert cls._default_role is Policy._default_role
    data = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF, f"{name}.yaml")))
    assert as_policy(name).base_rules == data.get("base_rules", [])
    assert shipped_rules(name) == data.get("base_rules", []) or name == "local"


def test_placements_from_the_rules(graph):
    assert as_policy("actors").place(graph).roles == {"rollout": "actor", "returns": "learner",
                                                      "learn": "learner"}
    # `when: {advantage: actors}`: the per-env chain follows the rollout
    assert as_policy({"name": "actors", "advantage": "actors"}).place(graph).roles == {
        "rollout": "actor", "returns": "actor", "learn": "learner"}
    assert as_policy("data_parallel").place(graph).roles == dict.fromkeys(["rollout", "returns", "learn"],
                                                                          "replica")
    ci = as_policy("central_inference").place(graph)
    assert ci.env_split == {"rollout": "env"} and set(ci.roles.values()) == {"learner"}
    assert as_policy("local").place(graph).kind == "in_process"


def test_editing_the_yaml_changes_the_placement(tmp_path, graph):
    data = OmegaConf.load(os.path.join(CONF, "actors.yaml"))
    data.name = "actors_with_returns"
    data.kind = "actors"
    data.base_rules = [{"tag": "rollout", "role": "actor", "pick": "first"},
                       {"tag": "per_env", "role": "actor", "chained": True}]  # no `when`
    path = tmp_path / "actors_with_returns.yaml"
    OmegaConf.save(data, path)
    pol = as_policy(str(path))
    assert pol.name == "actors_with_returns" and pol.advantage == "learner"
    assert pol.place(graph).roles == {"rollout": "actor", "returns": "actor", "learn": "learner"}


def test_pick_first_keeps_the_evaluation_rollout_on_the_learner():
    loop = EvalFactory()()
    g = capture(loop)
    assert as_policy("actors").place(g).roles["evaluate"] == "learner"
    # the override chooses which rollout the actors replicate
    roles = as_policy({"name": "actors", "placement": {"evaluate": "actor"}}).place(g).roles
    assert roles["evaluate"] == "actor" and roles["rollout"] == "learner"
    # a rule putting both rollouts on the actors is refused, naming what it got
    with pytest.raises(PolicyError, match=r"rollouts \['rollout', 'evaluate'\] on the workers.*"
                                          r"placement: \{evaluate: learner\}"):
        as_policy({"name": "actors", "rules": [{"tag": "rollout", "role": "actor"}]}).place(g)
    loop.close()


def test_user_loop_with_replay_placed_by_rules():
    loop = DQNFactory()()
    g = capture(loop)
    # decay is not per-env: it stays on the learner even with advantage=actors
    assert as_policy({"name": "actors", "advantage": "actors"}).place(g).nodes_of("actor") == ["rollout"]
    loop.close()


@pytest.mark.parametrize("rule, match", [
    ({"tag": "rollout", "role": "actor", "pick": "last"}, "pick must be 'first'"),
    ({"tag": "rollout", "role": "actor", "chained": "yes"}, "chained must be true or false"),
    ({"tag": "rollout", "role": "actor", "part": "act"}, "part must be 'env_step'"),
    ({"tag": "rollout", "role": "actor", "when": {"colour": "red"}}, "when must map policy fields"),
    ({"tag": "rollout", "role": "actor", "colour": "red"}, r"unknown keys \['colour'\]"),
    ({"role": "actor"}, "exactly one of"),
])
def test_bad_rules_refused(rule, match):
    for which in ("base_rules", "rules"):
        with pytest.raises(PolicyError, match=match):
            as_policy({"name": "actors", which: [rule]}).validate()


def test_shape_checks_of_the_classes(graph):
    with pytest.raises(PolicyError, match="every fragment runs on every replica"):
        as_policy({"name": "data_parallel", "base_rules": []}).place(graph)
    with pytest.raises(PolicyError, match="env step of exactly one rollout"):
        as_policy({"name": "central_inference", "base_rules": []}).place(graph)
    with pytest.raises(PolicyError, match="the actors run the rollout"):
        as_policy({"name": "actors", "base_rules": []}).place(graph)
