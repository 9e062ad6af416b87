"""The ``actor_pools`` policy: several pools of actors, each running one rollout of the loop.

The pools are worker groups (:mod:`torchfrag.policies.groups`) whose ``executor`` is
``actor_pools``; the rules (or ``placement``) put one rollout on each, e.g. the training
rollout on ``actors`` and an evaluation or probe rollout on ``probe``, each over its own env
slices. Every pool is run as an ``actors`` pool of its own
(:class:`torchfrag.runtime.actor_pools.ActorPools`). A user's policy may declare the pools as
``groups`` in YAML alone (no class); :class:`ActorPoolsPolicy` adds the ``pools`` shorthand
(name -> size) and the defaults.

Example:
    >>> from torchfrag.policies import as_policy
    >>> p = as_policy({"name": "actor_pools", "pools": {"actors": 2, "probe": 1}})
    >>> p.num_workers, p.roles
    (3, ('learner', 'actors', 'probe'))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchfrag.graph import FragmentGraph
from torchfrag.policies.base import (
    ActorsPolicy,
    Placement,
    Policy,
    PolicyError,
    register_policy,
    rollout_nodes,
)

__all__ = ["POOL_MEMBERS", "ActorPoolsPolicy", "as_actors", "check_pools", "composed_kind", "pool_executor",
           "pool_groups", "pool_placement"]

#: The executor kind of an actor pool group.
POOL_EXECUTOR = "actor_pools"
#: Executor a group may name to be one pool of a mixed placement -> the executor that runs that
#: pool (``actor_pools`` itself: a synchronous pool). Groups naming any of these may hold
#: fragments side by side; the placement is then run by ``actor_pools``, each pool by its own.
POOL_MEMBERS = {POOL_EXECUTOR: "replicated_rollout", "replicated_rollout": "replicated_rollout",
                "async_replicated_rollout": "async_replicated_rollout"}


def pool_groups(policy: Policy) -> list[str]:
    """The groups of ``policy`` that are actor pools, in declared order.

    A pool is a group whose executor is ``actor_pools``; in a policy with no such group but
    several rollout groups (executors ``replicated_rollout`` / ``async_replicated_rollout``
    side by side, see :func:`composed_kind`) each of those is a pool too.
    """
    from torchfrag.policies.groups import policy_groups

    groups = [g for g in policy_groups(policy).values() if g.executor in POOL_MEMBERS]
    if any(g.executor == POOL_EXECUTOR for g in groups) or len(groups) > 1:
        return [g.name for g in groups]
    return []


def pool_executor(policy: Policy, role: str) -> str:
    """The executor kind that runs pool ``role`` (``replicated_rollout`` or its async form)."""
    from torchfrag.policies.groups import policy_groups

    return POOL_MEMBERS[policy_groups(policy)[role].executor]


def composed_kind(policy: Policy, kinds: dict[str, str]) -> str:
    """The executor of a placement whose fragment-holding groups name different executors.

    Rollout pools compose: groups naming ``replicated_rollout``, ``async_replicated_rollout``
    or ``actor_pools`` run together under ``actor_pools``, each pool with its own executor
    (say a synchronous pool for the training rollout beside an asynchronous one for an
    evaluation rollout). Any other pair is refused.

    Args:
        policy: The policy (for messages).
        kinds: Group -> executor kind, for the groups holding fragments (at least two kinds).

    Raises:
        PolicyError: Two groups name executors that do not compose (one line, naming both).

    Example:
        >>> from torchfrag.policies import as_policy
        >>> composed_kind(as_policy("actors"), {"a": "replicated_rollout", "b": "async_replicated_rollout"})
        'actor_pools'
    """
    if all(k in POOL_MEMBERS for k in kinds.values()):
        return POOL_EXECUTOR
    g1 = next(g for g, k in kinds.items() if k not in POOL_MEMBERS)
    g2 = next(g for g, k in kinds.items() if k != kinds[g1])
    raise PolicyError(f"policy {policy.name}: group {g1!r} (executor {kinds[g1]}) and group {g2!r} "
                      f"(executor {kinds[g2]}) "
                      f"cannot run in one placement: only rollout pools ({', '.join(POOL_MEMBERS)}) compose; "
                      f"put those fragments on groups of one executor")


def as_actors(policy: Policy, role: str) -> ActorsPolicy:
    """The ``actors`` policy that runs pool ``role`` (its size, ``policy``'s other settings)."""
    return ActorsPolicy(name=f"{policy.name}[{role}]", actors=policy.replicas(role),
                        envs_per_actor=getattr(policy, "envs_per_actor", None),
                        sync_every=getattr(policy, "sync_every", 1),
                        on_failure=getattr(policy, "on_failure", "raise"),
                        env_threads=getattr(policy, "env_threads", None), timeout=policy.timeout,
                        master_addr=policy.master_addr, master_port=policy.master_port,
                        devices={"actor": policy.device(role), "learner": policy.device("learner")},
                        base_rules=[], max_workers=policy.max_workers)


def pool_placement(placement: Placement, role: str) -> Placement:
    """``placement`` as the ``actors`` placement of pool ``role``: its nodes on ``actor``, the rest
    on the learner."""
    roles = {n: ("actor" if r == role else "learner") for n, r in placement.roles.items()}
    return Placement(as_actors(placement.policy, role), placement.graph, roles)


def check_pools(placement: Placement) -> None:
    """Raises :class:`PolicyError` unless every pool holds one rollout (and the chain after it)."""
    policy, graph = placement.policy, placement.graph
    pools = pool_groups(policy)
    if not pools:
        raise PolicyError(f"policy {policy.name}: no group is an actor pool (executor {POOL_EXECUTOR}, or "
                          f"several groups naming {' / '.join(list(POOL_MEMBERS)[1:])})")
    found = rollout_nodes(graph)
    for role in pools:
        held = placement.nodes_of(role)
        rollouts = [n for n in held if n in found]
        if len(rollouts) != 1 or held[0] != rollouts[0]:
            raise PolicyError(f"policy {policy.name}: pool {role!r} must hold one rollout (and the chain "
                              f"after it); the rules put {held} on it; rollouts: {found} (add a rule "
                              f"such as {{node: {found[0] if found else 'rollout'}, role: {role}}})")
    for role in pools:
        ActorsPolicy.validate(as_actors(policy, role))


@register_policy
@dataclass
class ActorPoolsPolicy(Policy):
    """Several actor pools (groups with a size each), each running one rollout.

    Attributes:
        pools: Shorthand for ``groups``: pool name -> actor processes (each becomes a group
            ``{size: n, executor: actor_pools}``; ``groups`` may declare more, or devices).
            Every pool must hold exactly one rollout (by ``rules`` such as
            ``{node: probe, role: probe}`` or ``placement``).
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

    def declared_groups(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for role, n in (self.pools or {}).items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise PolicyError(f"policy {self.name}: pool {role!r} needs an integer >= 1 of actors, "
                                  f"got {n!r}")
            out[role] = {"size": n, "executor": POOL_EXECUTOR}
        for role, spec in super().declared_groups().items():
            out[role] = {**out.get(role, {}), **dict(spec or {})}
        return out

    def validate(self) -> None:
        if not isinstance(self.pools, dict) or not self.pools:
            raise PolicyError(f"policy {self.name}: pools must map a role name to its actor count, "
                              f"got {self.pools!r}")
        if "learner" in self.pools or not all(isinstance(r, str) for r in self.pools):
            raise PolicyError(f"policy {self.name}: pool names {list(self.pools)} may not include 'learner' "
                              "(the learner is the driver)")
        super().validate()
        ActorsPolicy.validate(as_actors(self, next(iter(self.pools))))  # the pools' shared settings

    def place(self, graph: FragmentGraph) -> Placement:
        placement = super().place(graph)
        check_pools(placement)
        return placement

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "pools": dict(self.pools)}
