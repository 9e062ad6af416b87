"""The ``apex`` policy (Ape-X): actors write to a replay worker, the learner samples from it.

A policy is data: its groups (``learner``, ``actor``, ``replay``: their sizes and executor,
:mod:`torchfrag.policies.groups`) and the rules that put the loop's fragments on them (the
rollout on the actors, every :class:`~torchfrag.fragments.ReplayWrite` and
:class:`~torchfrag.fragments.ReplaySample` on the replay worker), both in
``conf/policy/apex.yaml``. The executor that runs it is :class:`torchfrag.runtime.replay.Replay`,
the one its groups name. This class adds the defaults and the check of the replay group.

Example:
    >>> from torchfrag.policies import as_policy
    >>> as_policy({"name": "apex", "actors": 4}).num_workers  # 4 actors + the replay worker
    5
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchfrag.graph import FragmentGraph
from torchfrag.policies.base import ActorsPolicy, Placement, PolicyError, register_policy
from torchfrag.policies.rules import shipped

__all__ = ["ApexPolicy"]


@register_policy
@dataclass
class ApexPolicy(ActorsPolicy):
    """Actors run the rollout and write their batches into a replay worker; the learner samples.

    Every iteration each actor runs its rollout with the learner's weights (sent with the
    request every ``sync_every`` iterations, as under ``actors``) and writes the batch into
    the replay worker's buffer itself; the learner receives only the batch's rewards and done
    flags (for its frame and episode counts), then asks the replay worker for a sample.

    Attributes:
        actors: Actor processes (the replay worker is one more).
    """

    name: str = "apex"
    base_rules: list[dict[str, Any]] = field(default_factory=shipped("apex"))
    groups: dict[str, Any] = field(default_factory=shipped("apex", "groups"))

    def place(self, graph: FragmentGraph) -> Placement:
        placement = super().place(graph)
        from torchfrag.fragments import ReplaySample, ReplayWrite

        held = placement.nodes_of("replay")
        writes = [n for n in held if isinstance(graph.fragment(n), ReplayWrite)]
        samples = [n for n in held if isinstance(graph.fragment(n), ReplaySample)]
        if not any(isinstance(graph.fragment(n.name), (ReplayWrite, ReplaySample)) for n in graph.nodes):
            raise PolicyError(f"policy {self.name}: loop {graph.name!r} has no replay buffer (no ReplayWrite "
                              "and ReplaySample fragments) for the replay role; Ape-X places an off-policy "
                              "loop, e.g. algo=dqn")
        if len(writes) != 1 or len(samples) != 1 or len(held) != 2:
            raise PolicyError(f"policy {self.name}: the replay role holds one ReplayWrite and one "
                              f"ReplaySample of the same buffer; the rules put {held} on it "
                              f"(base_rules: {self.base_rules}, rules: {self.rules})")
        if graph.fragment(writes[0]).buffer is not graph.fragment(samples[0]).buffer:
            raise PolicyError(f"policy {self.name}: {writes[0]} and {samples[0]} use different buffers")
        # The actors write their batches themselves: a fragment upstream of the write left on the
        # learner would never see them (its output silently missing from the replay). One that
        # writes no key (DQN's epsilon annealing, a frame counter) adds nothing the replay misses:
        # it runs on the learner over the batch's rewards and done flags.
        skipped = [n for n in _upstream(graph, writes[0]) if placement.roles.get(n, "learner") == "learner"
                   and _writes_keys(graph.fragment(n))]
        if skipped:
            raise PolicyError(f"policy {self.name}: {skipped} feed {writes[0]} but are on the learner; the "
                              f"actors write into the replay themselves, so put them on the actors (a "
                              f"rule such as {{tag: per_env, role: actor, chained: true}})")
        return placement


def _writes_keys(fragment: Any) -> bool:
    """Whether ``fragment``'s output differs from its input (keys written, or a fresh TensorDict)."""
    return bool(getattr(fragment, "out_keys", ())) or not getattr(fragment, "passthrough", True)


def _upstream(graph: FragmentGraph, node: str) -> list[str]:
    """The fragments whose outputs reach ``node`` (through any fx node)."""
    fx_nodes = {n.name: n for n in graph.module.graph.nodes}
    seen: set[str] = set()
    todo = list(fx_nodes[node].all_input_nodes)
    while todo:
        n = todo.pop()
        if n.name not in seen:
            seen.add(n.name)
            todo.extend(n.all_input_nodes)
    return [n.name for n in graph.module.graph.nodes if n.op == "call_module" and n.name in seen]
