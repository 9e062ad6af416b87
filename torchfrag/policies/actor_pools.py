"""The ``actor_pools`` policy: several pools of actors, each running one rollout of the loop.

The pools are data: ``pools`` maps a role name to its number of actor processes, and the
rules (or ``placement``) put one rollout on each pool, e.g. the training rollout on
``actors`` and an evaluation or probe rollout on ``probe``, each over its own env slices.
Every pool is run as an ``actors`` pool of its own (:class:`torchfrag.runtime.actor_pools.ActorPools`).

Example:
    >>> from torchfrag.policies import as_policy
    >>> p = as_policy({"name": "actor_pools", "pools": {"actors": 2, "probe": 1}})
    >>> p.num_workers, p.roles
    (3, ('learner', 'actors', 'probe'))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from torchfrag.graph import FragmentGraph
from torchfrag.policies.base import ActorsPolicy, Placement, Policy, PolicyError, register_policy, rollout_nodes

__all__ = ["ActorPoolsPolicy"]


@register_policy
@dataclass
class ActorPoolsPolicy(Policy):
    """Several actor pools (named roles with a size each), each running one rollout.

    Attributes:
        pools: Role name -> actor processes of that pool. Every pool must hold exactly one
            rollout (by ``rules`` such as ``{node: probe, role: probe}`` or ``placement``).
        envs_per_actor: Envs on each actor (``None``: each rollout's envs split over its pool).
        sync_every: Send the learner's state to the actors every this many iterations.
        on_failure: ``"raise"`` or ``"continue"`` with the remaining actors of a pool.
        env_threads: Threads of each actor's env pool.
    """

    name: str = "actor_pools"
    pools: dict[str, int] = field(default_factory=lambda: {"actors": 2, "probe": 1})
    envs_per_actor: int | None = None
    sync_every: int = 1
    on_failure: str = "raise"
    env_threads: int | None = None
    executor: ClassVar[str] = "actor_pools"

    @property
    def roles(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("learner", *self.pools)

    @property
    def num_workers(self) -> int:
        return sum(int(n) for n in self.pools.values())

    def replicas(self, role: str) -> int:
        return int(self.pools.get(role, 1))

    def validate(self) -> None:
        if not isinstance(self.pools, dict) or not self.pools:
            raise PolicyError(f"policy {self.name}: pools must map a role name to its actor count, "
                              f"got {self.pools!r}")
        for role, n in self.pools.items():
            if role == "learner" or not isinstance(role, str):
                raise PolicyError(f"policy {self.name}: pool name {role!r} is not allowed (the learner "
                                  "is the driver)")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise PolicyError(f"policy {self.name}: pool {role!r} needs an integer >= 1 of actors, "
                                  f"got {n!r}")
        ActorsPolicy.validate(self.as_actors(next(iter(self.pools))))
        super().validate()

    def as_actors(self, role: str) -> ActorsPolicy:
        """The ``actors`` policy that runs pool ``role`` (its size, this policy's other settings)."""
        return ActorsPolicy(name=f"{self.name}[{role}]", actors=int(self.pools[role]),
                            envs_per_actor=self.envs_per_actor, sync_every=self.sync_every,
                            on_failure=self.on_failure, env_threads=self.env_threads, timeout=self.timeout,
                            master_addr=self.master_addr, master_port=self.master_port,
                            devices={"actor": self.device(role), "learner": self.device("learner")},
                            base_rules=[], max_workers=self.max_workers)

    def pool_placement(self, placement: Placement, role: str) -> Placement:
        """``placement`` as the ``actors`` placement of pool ``role``: its nodes on ``actor``, the rest
        on the learner."""
        roles = {n: ("actor" if r == role else "learner") for n, r in placement.roles.items()}
        return Placement(self.as_actors(role), placement.graph, roles)

    def place(self, graph: FragmentGraph) -> Placement:
        placement = super().place(graph)
        found = rollout_nodes(graph)
        for role in self.pools:
            held = placement.nodes_of(role)
            rollouts = [n for n in held if n in found]
            if len(rollouts) != 1 or held[0] != rollouts[0]:
                raise PolicyError(f"policy {self.name}: pool {role!r} must hold one rollout (and the chain "
                                  f"after it); the rules put {held} on it; rollouts: {found} (add a rule "
                                  f"such as {{node: {found[0] if found else 'rollout'}, role: {role}}})")
        return placement

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "pools": dict(self.pools)}
