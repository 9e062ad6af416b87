"""The ``apex`` policy (Ape-X): actors write to a replay worker, the learner samples from it.

A policy is data: its roles (``learner``, ``actor``, ``replay``), how many processes each
has, and the rules of ``conf/policy/apex.yaml`` that put the loop's fragments on them (the
rollout on the actors, every :class:`~torchfrag.fragments.ReplayWrite` and
:class:`~torchfrag.fragments.ReplaySample` on the replay worker). The executor that runs it
is :class:`torchfrag.runtime.replay.Replay`, chosen because the ``replay`` role holds nodes
(:data:`~torchfrag.policies.base.ROLE_EXECUTORS`).

Example:
    >>> from torchfrag.policies import as_policy
    >>> as_policy({"name": "apex", "actors": 4}).num_workers  # 4 actors + the replay worker
    5
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from torchfrag.graph import FragmentGraph
from torchfrag.policies.base import ROLE_EXECUTORS, ActorsPolicy, Placement, PolicyError, register_policy
from torchfrag.policies.rules import shipped

__all__ = ["ApexPolicy"]

ROLE_EXECUTORS["replay"] = "replay"


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
    roles: ClassVar[tuple[str, ...]] = ("learner", "actor", "replay")

    @property
    def num_workers(self) -> int:
        return int(self.actors) + 1

    def replicas(self, role: str) -> int:
        return {"actor": int(self.actors), "replay": 1}.get(role, 1)

    def place(self, graph: FragmentGraph) -> Placement:
        placement = super().place(graph)
        from torchfrag.fragments import ReplaySample, ReplayWrite

        held = placement.nodes_of("replay")
        writes = [n for n in held if isinstance(graph.fragment(n), ReplayWrite)]
        samples = [n for n in held if isinstance(graph.fragment(n), ReplaySample)]
        if len(writes) != 1 or len(samples) != 1 or len(held) != 2:
            raise PolicyError(f"policy {self.name}: the replay role holds one ReplayWrite and one "
                              f"ReplaySample of the same buffer; the rules put {held} on it "
                              f"(base_rules: {self.base_rules}, rules: {self.rules})")
        if graph.fragment(writes[0]).buffer is not graph.fragment(samples[0]).buffer:
            raise PolicyError(f"policy {self.name}: {writes[0]} and {samples[0]} use different buffers")
        return placement
