"""Adding an executor kind without touching torchfrag (issue 25): a class and a YAML policy.

The executor is registered here (:func:`~torchfrag.runtime.executor.register_executor`) and a
policy written only in YAML names it in its driver group, with the setting the executor reads
as a group option: no policy class, no field, no edit of torchfrag. The executor runs every
iteration of the loop ``times`` times, so its effect is counted exactly in the rollout's frames.
The shipped policies' executors read their settings the same way (``options`` of their groups,
which name the policy's fields), so a command-line override reaches them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from torchfrag.graph import FragmentGraph, capture
from torchfrag.policies import PolicyError, as_policy, explain, load_policy_file
from torchfrag.runtime import run
from torchfrag.runtime.executor import Executor, register_executor

from test_placement_engine import ReinforceFactory


@register_executor
class RepeatedInProcess(Executor):
    """``repeated_in_process``: each iteration runs the loop ``times`` times (a group option)."""

    kind: ClassVar[str] = "repeated_in_process"
    runs_in_process: ClassVar[bool] = True

    @classmethod
    def run(cls, graph: FragmentGraph, placement: Any, factory: Any, iterations: int,
            hooks: Sequence[Any], inputs: Sequence[Any], start: int) -> Any:
        from torchfrag.runtime.local import run as run_local

        times = int(placement.option("times", 1))
        result = run_local(graph, "local", iterations * times, list(hooks), inputs, start=start)
        result.extra.update(executor=cls.kind, policy=placement.policy.name, times=times)
        return result


YAML = """
name: three_times
groups:
  learner: {executor: repeated_in_process, options: {times: 3}}
"""


def test_registered_executor_runs_under_a_yaml_only_policy(tmp_path):
    path = tmp_path / "three_times.yaml"
    path.write_text(YAML)
    policy = load_policy_file(str(path))
    assert type(policy).__name__ == "Policy"  # no class: the YAML is the whole policy
    f = ReinforceFactory(num_envs=4, steps=8)
    loop = f()
    graph = capture(loop)
    placement = policy.place(graph)
    assert placement.kind == "repeated_in_process" and placement.option("times") == 3
    assert "no edge crosses processes" in explain(graph, policy, show=False)  # its crossings: none
    res = run(graph, policy, iterations=2)
    assert res.extra["executor"] == "repeated_in_process" and res.extra["times"] == 3
    assert loop.rollout.frames == 2 * 3 * 4 * 8  # 2 iterations, each the loop 3 times
    loop.close()


def test_shipped_executors_read_group_options_that_follow_the_fields():
    loop = ReinforceFactory()()
    graph = capture(loop)
    placement = as_policy({"name": "actors", "sync_every": 3}).place(graph)
    assert placement.options()["sync_every"] == 3  # the group's option names the field
    placement = as_policy({"name": "async_actors", "staleness": 5}).place(graph)
    assert placement.option("staleness") == 5
    assert as_policy({"name": "data_parallel", "replicate_envs": True}).place(graph).option("replicate_envs")
    loop.close()


def test_bad_options_refused_in_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\ngroups:\n  learner: {executor: repeated_in_process, options: [3]}\n")
    with pytest.raises(PolicyError, match="options of group 'learner' must be a mapping"):
        load_policy_file(str(path)).place(capture(ReinforceFactory()()))
