"""Worker groups as data: a user's policy written only in YAML, with groups no shipped policy has.

The loop is a user's (``TrainAndProbe`` of ``test_placement_two_rollouts`` built by
``PoolsFactory`` of ``test_placement_pools``, with deterministic actions): a REINFORCE learner
trained on one rollout (``collect``, 4 envs) while a second
rollout (``probe``, 2 envs of another seed) runs the same actor. The
policy is a YAML file, no class and no ``kind``: two groups named ``workers`` (2 processes)
and ``scouts`` (1 process), each an actor pool, and rules that put one rollout on each. With
deterministic actions the learner's parameters after three iterations equal ``local``'s (the
same frames, the same steps), and each pool collects exactly its rollout's frames.

Bad groups are refused before any process starts, with one line naming the problem.
"""
from __future__ import annotations

import pytest
import torch
from _policy_helpers import wait_no_children
from test_placement_pools import PoolsFactory
from test_placement_two_rollouts import STEPS
from torch import nn

from torchfrag.graph import capture
from torchfrag.policies import PolicyError, as_policy, crossings, load_policy_file
from torchfrag.runtime import run

#: A policy that is data alone: its groups (sizes, executor) and the rules that fill them.
YAML = """
name: scouts_and_workers
groups:
  workers: {size: 2, executor: actor_pools}
  scouts: {size: 1, executor: actor_pools}
rules:
  - {node: collect, role: workers}
  - {node: probe, role: scouts}
"""


def _params(loop: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in loop.parameters()])


def _yaml_policy(tmp_path, text: str = YAML):
    path = tmp_path / "scouts_and_workers.yaml"
    path.write_text(text)
    return load_policy_file(str(path))


@pytest.mark.slow
def test_yaml_only_groups_run_and_learn_as_local(tmp_path):
    policy = _yaml_policy(tmp_path)
    assert type(policy).__name__ == "Policy"  # no class: the YAML is the whole policy
    assert policy.roles == ("learner", "workers", "scouts") and policy.num_workers == 3
    f = PoolsFactory(exploration="mode")
    loop = f()
    graph = capture(loop)
    placement = policy.place(graph)
    assert placement.kind == "actor_pools"  # from the groups, not from a class or a name
    assert placement.roles == {"probe": "scouts", "collect": "workers", "returns": "learner", "learn": "learner"}
    cross = crossings(placement)
    assert {c.dst for c in cross if c.kind == "state"} == {"collect@workers[2]", "probe@scouts[1]"}

    local = f()
    run(capture(local), "local", iterations=3)
    res = run(graph, policy, iterations=3, factory=f)
    assert wait_no_children() == []
    assert res.extra["executor"] == "actor_pools" and res.extra["frames_missing"] == 0
    assert loop.collect.frames == local.collect.frames == 3 * 4 * STEPS
    assert loop.probe.frames == local.probe.frames == 3 * 2 * (STEPS // 2)
    assert not torch.equal(_params(loop), _params(f()))  # it learned
    torch.testing.assert_close(_params(loop), _params(local), rtol=1e-5, atol=1e-6)
    assert res.extra["comm"]["bytes"] == sum(c.bytes for c in cross)  # explain = what was sent
    loop.close(), local.close()


def test_groups_from_the_cli(tmp_path):
    """A user config folder holds the YAML policy; the command line resizes its groups, and the
    shipped policies' groups still follow their fields (``policy.actors=4``)."""
    from torchfrag.train import compose_config

    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "scouts_and_workers.yaml").write_text(YAML)
    cfg = compose_config([f"hydra.searchpath=[file://{tmp_path}]", "policy=scouts_and_workers",
                          "policy.groups.workers.size=3"])
    policy = as_policy(cfg.policy)
    assert policy.replicas("workers") == 3 and policy.num_workers == 4
    actors = as_policy(compose_config(["policy=actors", "policy.actors=4"]).policy)
    assert actors.replicas("actor") == 4 and actors.num_workers == 4
    ml = as_policy(compose_config(["policy=multi_learner", "policy.learners=3"]).policy)
    assert (ml.replicas("learner"), ml.replicas("actor"), ml.num_workers) == (3, 6, 8)


@pytest.mark.parametrize("change, match", [
    ("  scouts: {size: 1, executor: warp_drive}",
     "group 'scouts' names executor kind 'warp_drive', which no executor runs"),
    ("  scouts: {size: 0, executor: actor_pools}", "group 'scouts' has size 0"),
    ("  scouts: {size: 1, executor: actor_pools, cores: 4}", r"group 'scouts' has unknown key\(s\) \['cores'\]"),
    ("  scouts: {size: 1, executor: replay}",  # rollout pools compose; a replay group does not
     "group 'scouts' \\(executor replay\\) and group 'workers' \\(executor actor_pools\\) cannot run in one "
     "placement: only rollout pools"),
    ("  scouts: {size: many, executor: actor_pools}",
     "group 'scouts' takes its size from field 'many', which the policy does not have"),
])
def test_bad_groups_refused_in_one_line(tmp_path, change, match):
    text = YAML.replace("  scouts: {size: 1, executor: actor_pools}", change)
    loop = PoolsFactory(exploration="mode")()
    with pytest.raises(PolicyError, match=match) as err:
        _yaml_policy(tmp_path, text).place(capture(loop))
    assert "\n" not in str(err.value)
    loop.close()


def test_rule_naming_an_absent_group_refused(tmp_path):
    text = YAML.replace("role: scouts", "role: scout")
    loop = PoolsFactory(exploration="mode")()
    with pytest.raises(PolicyError, match=r"rules\[1\] assigns unknown role 'scout' \(no group of that name\); "
                                          r"groups: \['learner', 'workers', 'scouts'\]") as err:
        _yaml_policy(tmp_path, text).place(capture(loop))
    assert "\n" not in str(err.value)
    # a pool group the rules leave empty: refused before any process starts
    text = YAML.replace("  - {node: probe, role: scouts}\n", "")
    with pytest.raises(PolicyError, match="pool 'scouts' must hold one rollout"):
        run(capture(loop), _yaml_policy(tmp_path, text), iterations=1, factory=PoolsFactory(exploration="mode"))
    assert wait_no_children() == []
    loop.close()


#: A replay shape under names of the user's own: collectors write, a buffer group samples.
REPLAY_YAML = """
name: collectors_and_buffer
groups:
  collectors: {size: 2, executor: replay}
  buffer: {size: 1, executor: replay}
rules:
  - {tag: rollout, role: collectors, pick: first}
  - {cls: ReplayWrite, role: buffer}
  - {cls: ReplaySample, role: buffer}
"""


@pytest.mark.slow
def test_yaml_only_replay_groups_collect_as_local(tmp_path):
    from test_placement_replay import STEPS as REPLAY_STEPS
    from test_placement_replay import ApeXFactory

    policy = _yaml_policy(tmp_path, REPLAY_YAML)
    factory = ApeXFactory(envs=4, actors=2)
    loop = factory()
    graph = capture(loop)
    placement = policy.place(graph)
    assert placement.kind == "replay"
    assert placement.roles == {"rollout": "collectors", "write": "buffer", "sample": "buffer", "learn": "learner"}
    cross = crossings(placement)
    (to_buffer,) = [c for c in cross if c.dst == "write@buffer[1]"]
    assert to_buffer.src == "rollout@collectors[2]"
    local = factory()
    run(capture(local), "local", iterations=2)
    res = run(graph, policy, iterations=2, factory=factory)
    assert wait_no_children() == []
    assert res.extra["executor"] == "replay"
    assert loop.rollout.frames == local.rollout.frames == 2 * 4 * REPLAY_STEPS
    assert res.extra["comm"]["replay_bytes"] == to_buffer.bytes  # the collectors wrote it themselves
    assert res.extra["comm"]["bytes"] == sum(c.bytes for c in cross if c is not to_buffer)
    assert not torch.equal(_params(loop), _params(factory()))  # the learner stepped on the samples
    loop.close(), local.close()


def test_replay_groups_need_one_buffer_group(tmp_path):
    """The replay executor reads which group is which from what they hold, or refuses in one line."""
    from test_placement_replay import ApeXFactory

    text = REPLAY_YAML.replace("  - {cls: ReplaySample, role: buffer}\n", "")
    loop = ApeXFactory(envs=4, actors=2)()
    placement = _yaml_policy(tmp_path, text).place(capture(loop))
    with pytest.raises(PolicyError, match="one holding a ReplayWrite and a ReplaySample") as err:
        crossings(placement)
    assert "\n" not in str(err.value)
    loop.close()
