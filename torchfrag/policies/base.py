"""Distribution policies: where each fragment of a captured loop runs.

A policy is a plain dataclass (also registered as a Hydra structured config,
``conf/policy/<name>.yaml``). :meth:`Policy.place` maps a
:class:`~torchfrag.graph.FragmentGraph` onto named *worker groups* (the
policy's ``groups``: a size, a device and an executor kind each, see
:mod:`torchfrag.policies.groups`; the driver is the group ``learner``) by
its rules, and checks everything that can be checked before a process
starts: group sizes, executor kinds, fragment names, devices.

Example:
    >>> from torchfrag.policies import ActorsPolicy
    >>> ActorsPolicy(actors=2).name
    'actors'
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from torchfrag.graph import FragmentGraph
from torchfrag.policies.rules import RULE_MATCHERS, apply_rules, check_rule, rule_matches, shipped

logger = logging.getLogger(__name__)

__all__ = [
    "PolicyError", "Policy", "LocalPolicy", "ActorsPolicy", "AsyncActorsPolicy",
    "CentralInferencePolicy", "DataParallelPolicy", "MultiLearnerPolicy", "SingleDevicePolicy",
    "Placement", "POLICY_CLASSES", "EXECUTOR_KINDS", "ROLE_EXECUTORS", "register_policy", "load_policy_file", "rule_matches", "RULE_MATCHERS", "as_policy", "MAX_WORKERS", "is_per_env", "per_env_chain",
]

#: Every policy by name: the one list (filled by :func:`register_policy`).
POLICY_CLASSES: dict[str, type[Policy]] = {}


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Class decorator: makes a :class:`Policy` subclass available by its ``name`` default.

    Adding a policy touches this one place (plus, for the CLI, a ``conf/policy`` YAML file
    or one in the user's own config folder).

    Example:
        >>> from dataclasses import dataclass
        >>> from torchfrag.policies import ActorsPolicy, as_policy, register_policy
        >>> @register_policy
        ... @dataclass
        ... class FourActors(ActorsPolicy):
        ...     name: str = "four_actors"
        ...     actors: int = 4
        >>> as_policy("four_actors").num_workers
        4
    """
    name = next(f.default for f in fields(cls) if f.name == "name")
    if not isinstance(name, str) or not name:
        raise PolicyError(f"{cls.__name__}: a registered policy needs a default `name`")
    POLICY_CLASSES[name] = cls
    return cls


#: Upper bound on the workers of one run (a guard against typos such as ``actors=4000``).
MAX_WORKERS = 256


class PolicyError(ValueError):
    """A policy that cannot be applied to this graph or machine (raised before any process starts)."""


@dataclass
class Policy:
    """Fields every policy has.

    Attributes:
        name: Policy name (the ``conf/policy`` file name).
        timeout: Seconds a remote call may take before the run fails (also
            the RPC start-up and shutdown bound).
        master_addr: Address of node 0 (the driver), where the rendezvous listens; every other
            node's processes listen on the address of their interface that reaches it. An IP
            address or a resolvable hostname; loopback by default (RPC unpickles what it
            receives: expose it only to trusted peers).
        master_port: Port of the rendezvous; 0 picks a free one.
        devices: Device per role (``{"learner": "cuda:0"}``); ``cpu`` by default.
        compile: Compile the learner's and policy's networks with ``torch.compile``.
        compile_backend: ``torch.compile`` backend.
        placement: Overrides: fragment node name -> role (applied last).
        base_rules: The policy's own placement rules (every fragment not matched stays on the
            ``learner``); the shipped policies' are read from their ``conf/policy/<name>.yaml``.
            Schema: :mod:`torchfrag.policies.rules` (one matcher, ``node``, ``cls``, ``tag``,
            ``predicate`` or ``all``, the ``role`` it assigns, and optionally ``pick``,
            ``chained``, ``part``, ``when``).
        rules: More placement rules (same schema), applied in order after ``base_rules``,
            e.g. ``{tag: per_env, role: actor}`` (a ``tag`` is a declared role of
            :meth:`~torchfrag.fragments.Fragment.tags`: ``rollout``, ``env``, ``act``,
            ``learn``, ``per_env``, ``impure``, ``optimizer``).
        groups: The policy's worker groups as data: group name -> ``{size, device, executor,
            driver, options}`` (:mod:`torchfrag.policies.groups`); rules put fragments on them. The
            driver is the group ``learner``. The shipped policies' are read from their YAML.
        kind: The registered policy this one configures, when ``name`` is a new name (a
            user's YAML policy: ``name: my_actors``, ``kind: actors``); empty: ``name``.
        max_workers: Refuse runs with more worker processes than this.
    """

    name: str = "local"
    timeout: float = 120.0
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    devices: dict[str, str] = field(default_factory=dict)
    compile: bool = False
    compile_backend: str = "inductor"
    placement: dict[str, str] = field(default_factory=dict)
    base_rules: list[dict[str, Any]] = field(default_factory=list)
    rules: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[str, Any] = field(default_factory=dict)
    kind: str = ""
    max_workers: int = 64

    #: For a policy class that declares no group executor: whether the actors' requests stay in
    #: flight (the shape-based choice of :attr:`Placement.kind`).
    asynchronous: ClassVar[bool] = False
    #: For a policy class that declares no group executor: whether the ``learner`` role is a
    #: group of processes, even when it has one member.
    replicated_learner: ClassVar[bool] = False

    def declared_groups(self) -> dict[str, Any]:
        """The groups as declared (``groups``; a policy class may add its own shorthand)."""
        return dict(self.groups or {})

    @property
    def roles(self) -> tuple[str, ...]:
        """The names of this policy's groups (``learner``, the driver, first)."""
        from torchfrag.policies.groups import policy_groups

        return tuple(policy_groups(self))

    @property
    def num_workers(self) -> int:
        """Worker processes besides the driver (every group's size, the driver's member not counted)."""
        from torchfrag.policies.groups import policy_groups

        return sum(g.size - int(g.driver) for g in policy_groups(self).values())

    @property
    def distributed(self) -> bool:
        """Whether the policy starts worker processes."""
        return self.num_workers > 0

    def replicas(self, role: str) -> int:
        """Processes of group ``role`` (1 for the driver's ``learner`` unless declared larger)."""
        from torchfrag.policies.groups import policy_groups

        group = policy_groups(self).get(role)
        return group.size if group is not None else 1

    def device(self, role: str) -> str:
        """Device of group ``role``."""
        from torchfrag.policies.groups import policy_groups

        group = policy_groups(self).get(role)
        return group.device if group is not None else str(self.devices.get(role, self.devices.get("default", "cpu")))

    # -- validation ------------------------------------------------------------------------
    def validate(self) -> None:
        """Checks the policy's own fields (counts, devices); raises :class:`PolicyError`."""
        import math

        from torchfrag.policies.groups import check_groups

        check_groups(self)
        if not isinstance(self.timeout, (int, float)) or not math.isfinite(self.timeout) or self.timeout <= 0:
            raise PolicyError(f"policy {self.name}: timeout must be a finite number of seconds > 0, got "
                              f"{self.timeout!r} (a worker that never answers must fail the run)")
        if self.num_workers > min(self.max_workers, MAX_WORKERS):
            raise PolicyError(
                f"policy {self.name} asks for {self.num_workers} worker processes, more than "
                f"max_workers={min(self.max_workers, MAX_WORKERS)}; lower the worker count or raise "
                "policy.max_workers")
        for role, dev in self.devices.items():
            if role != "default" and role not in self.roles:
                raise PolicyError(f"policy {self.name}: devices names role {role!r}, which it does not "
                                  f"have; roles: {list(self.roles)}")
            check_device(dev, f"policy {self.name}: device of role {role!r}")
        for frag, role in self.placement.items():
            if role not in self.roles:
                raise PolicyError(f"policy {self.name}: placement puts {frag!r} on unknown role "
                                  f"{role!r} (no group of that name); groups: {list(self.roles)}")
        names = [f.name for f in fields(self) if f.init]
        for which in ("base_rules", "rules"):
            for i, rule in enumerate(getattr(self, which)):
                wrong = check_rule(dict(rule) if hasattr(rule, "items") else rule, f"{which}[{i}]",
                                   self.roles, names)
                if wrong:
                    raise PolicyError(f"policy {self.name}: {wrong}")
        self._check_env_threads()
        self._check_master_addr()

    def _check_env_threads(self) -> None:
        """``env_threads``, where the policy has it: ``None`` (the pool default) or what a pool accepts."""
        from torchfrag.envs.pool import MAX_THREADS

        threads = getattr(self, "env_threads", None)
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or not 1 <= threads <= MAX_THREADS):
            raise PolicyError(f"policy {self.name}: env_threads must be in [1, {MAX_THREADS}] "
                              f"(or null: the pool default), got {threads!r}")

    def _check_master_addr(self) -> None:
        """``master_addr`` is an IP address or a resolvable hostname (on node 0: one of this machine's)."""
        from torchfrag.network import AddressError, check_master_addr

        from_env = os.environ.get("TORCHFRAG_MASTER_ADDR")
        key = "TORCHFRAG_MASTER_ADDR" if from_env and from_env == self.master_addr else "policy.master_addr"
        try:
            check_master_addr(self.master_addr, key, node0=os.environ.get("RANK", "0") == "0")
        except AddressError as err:
            raise PolicyError(f"policy {self.name}: {err}") from None

    def place(self, graph: FragmentGraph) -> Placement:
        """Assigns every fragment node of ``graph`` to a role; validates first.

        Raises:
            PolicyError: Bad counts, unknown fragment names, absent devices, or a
                graph this policy cannot place.
        """
        self.validate()
        names = {n.name for n in graph.nodes} | {n.target for n in graph.nodes}
        for frag in self.placement:
            if frag not in names:
                raise PolicyError(
                    f"policy {self.name}: placement names fragment {frag!r}, which is not in the "
                    f"captured graph; fragments: {[n.name for n in graph.nodes]}")
        roles = {n.name: self._default_role(graph, n.name) for n in graph.nodes}
        pinned = {graph.node(frag).name: role for frag, role in self.placement.items()}
        env_split = apply_rules(self, graph, [*self.base_rules, *self.rules], roles, pinned)
        roles.update(pinned)
        placement = Placement(self, graph, roles, env_split)
        placement.declared_kind()  # groups that disagree on their executor are refused here
        return placement

    def _default_role(self, graph: FragmentGraph, node: str) -> str:
        """Role of ``node`` before any rule (``learner``); a user's policy class may override it."""
        return "learner"

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (picklable)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}


def check_device(dev: str, what: str) -> None:
    """Raises :class:`PolicyError` when ``dev`` does not exist on this machine."""
    import torch

    try:
        d = torch.device(dev)
    except RuntimeError as err:
        raise PolicyError(f"{what}: {dev!r} is not a device ({err})") from None
    if d.type == "cpu":
        return
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise PolicyError(f"{what}: {dev!r} requested but CUDA is not available on this machine "
                              "(set the device to 'cpu')")
        if d.index is not None and d.index >= torch.cuda.device_count():
            raise PolicyError(f"{what}: {dev!r} requested but only {torch.cuda.device_count()} "
                              "CUDA device(s) exist")
        return
    if d.type == "mps" and not torch.backends.mps.is_available():
        raise PolicyError(f"{what}: {dev!r} requested but MPS is not available")


def rollout_nodes(graph: FragmentGraph) -> list[str]:
    """Nodes that declare :attr:`~torchfrag.fragments.Fragment.role` ``"rollout"`` (drive an env over time)."""
    return [n.name for n in graph.nodes if getattr(n.module, "role", None) == "rollout"]


def env_nodes(graph: FragmentGraph) -> list[str]:
    """Rollout nodes whose captured per-step body has an env fragment (a policy may place it apart)."""
    out = []
    for name in rollout_nodes(graph):
        body = getattr(graph.fragment(name), "body_graph", None)
        if body is not None and any(getattr(n.module, "role", None) == "env" for n in body.nodes):
            out.append(name)
    return out


#: Where an actors policy runs the per-env fragments after the rollout.
ADVANTAGE_MODES = ("learner", "on_arrival", "actors")

def is_per_env(module: Any) -> bool:
    """Whether a fragment declares :attr:`~torchfrag.fragments.Fragment.per_env`.

    Such a fragment computes every env's rows from that env's rows alone, so a policy may
    run it on the actors, each on its own slice.

    Example:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.objectives.value import GAE
        >>> from torchfrag.fragments import Advantage
        >>> critic = TensorDictModule(torch.nn.Linear(4, 1), ["observation"], ["state_value"])
        >>> is_per_env(Advantage(GAE(gamma=0.99, lmbda=0.95, value_network=critic)))
        True
        >>> is_per_env(Advantage(GAE(gamma=0.99, lmbda=0.95, value_network=critic, average_gae=True)))
        False
    """
    return bool(getattr(module, "per_env", False))


def per_env_chain(graph: FragmentGraph, rollout: str, per_env_only: bool = True) -> list[str]:
    """The fragments that follow ``rollout`` in a chain (each the only user of the one before).

    In a PPO loop ``rollout -> [scale] -> advantage -> learn`` this is
    ``["scale", "advantage"]``: fragments that an ``actors`` policy can run on
    every actor, after its rollout and on its own batch.

    Args:
        graph: The captured loop.
        rollout: The rollout node.
        per_env_only: Stop at the first fragment that is not per-env (:func:`is_per_env`);
            ``False`` follows the chain structure alone (impure fragments still end it).
    """
    fx_nodes = {n.name: n for n in graph.module.graph.nodes if n.op == "call_module"}
    chain: list[str] = []
    prev = fx_nodes.get(rollout)
    while prev is not None and len(prev.users) == 1:
        nxt = next(iter(prev.users))
        if (nxt.op != "call_module" or nxt.name not in fx_nodes or list(nxt.args) != [prev]
                or nxt.kwargs):
            break
        frag = graph.node(nxt.name)
        if frag.impure or (per_env_only and not is_per_env(frag.module)):
            break
        chain.append(nxt.name)
        prev = nxt
    return chain


def _one_rollout(policy: Policy, graph: FragmentGraph, finder: Any = rollout_nodes) -> str:
    """The rollout a policy replicates: the one its ``placement`` puts on a worker role, else the first.

    Other rollouts (an evaluation rollout, say) stay on the driver.
    """
    found = finder(graph)
    if not found:
        raise PolicyError(
            f"policy {policy.name} needs a fragment that declares role 'rollout' (a "
            f"torchfrag.fragments.Rollout or Collect, or a Fragment subclass with role = 'rollout') "
            f"in the loop; fragments: {[n.name for n in graph.nodes]}")
    pinned = [n for n in found
              if policy.placement.get(n, policy.placement.get(graph.node(n).target)) not in (None, "learner")]
    if len(pinned) > 1:
        raise several_rollouts(policy, pinned)
    return pinned[0] if pinned else found[0]


def several_rollouts(policy: Policy, rollouts: list[str]) -> PolicyError:
    """The refusal of a placement that puts several rollouts on one replicated role."""
    keep = ", ".join(f"{n}: learner" for n in rollouts[1:])
    return PolicyError(
        f"policy {policy.name}: the placement puts the rollouts {rollouts} on the workers; the workers "
        f"replicate one rollout (and the chain after it) and every other rollout runs on the learner: "
        f"place one of them, e.g. placement: {{{keep}}}")


@register_policy
@dataclass
class LocalPolicy(Policy):
    """Everything in this process (the default).

    Example:
        >>> from torchfrag.policies import LocalPolicy
        >>> LocalPolicy().num_workers
        0
    """

    name: str = "local"


@register_policy
@dataclass
class ActorsPolicy(Policy):
    """N actor workers run env + act (the rollout); the learner gathers rollouts every iteration.

    Weights are broadcast back along the graph's shared-parameter edges (learn ->
    rollout, and learn -> advantage when the advantage runs on the actors) every
    ``sync_every`` iterations, in the same RPC call that asks for the next rollout
    (one call per actor per iteration).

    ``advantage`` says where the per-env fragments that follow the rollout (reward
    scaling, GAE: :func:`per_env_chain`) run:

    * ``"learner"`` (default): on the learner, on the gathered batch;
    * ``"on_arrival"``: on the learner, on each actor's batch as soon as it arrives,
      while the learner still waits for the slower actors (the wait hides part of
      their cost);
    * ``"actors"``: on every actor after its rollout, with the weights that came with
      the request (the learner's current ones: the policy is synchronous), as
      RLlib's rollout workers do; useful where every actor has a core of its own.

    Per-batch GAE equals ``local`` up to the rounding of the critic's smaller matmuls.

    Attributes:
        actors: Actor worker processes.
        envs_per_actor: Envs on each actor; ``None`` splits the loop's envs evenly
            (the same data as ``local``); a number gives every actor that many envs
            (weak scaling: ``actors * envs_per_actor`` envs in all).
        sync_every: Broadcast weights every this many iterations.
        on_failure: ``"raise"`` (default) or ``"continue"`` with the remaining actors.
        env_threads: Threads of each actor's env pool (``None``: the pool default).
        advantage: Where the per-env fragments after the rollout run: ``"learner"``,
            ``"on_arrival"`` or ``"actors"`` (see above). ``placement`` overrides it per fragment.

    Example:
        >>> from torchfrag.policies import ActorsPolicy
        >>> ActorsPolicy(actors=4).num_workers
        4
    """

    name: str = "actors"
    actors: int = 2
    envs_per_actor: int | None = None
    sync_every: int = 1
    on_failure: str = "raise"
    env_threads: int | None = None
    advantage: str = "learner"
    base_rules: list[dict[str, Any]] = field(default_factory=shipped("actors"))
    groups: dict[str, Any] = field(default_factory=shipped("actors", "groups"))

    def validate(self) -> None:
        if self.actors < 1:
            raise PolicyError(f"policy {self.name}: actors must be >= 1, got {self.actors}")
        if self.envs_per_actor is not None and self.envs_per_actor < 1:
            raise PolicyError(f"policy {self.name}: envs_per_actor must be >= 1, got {self.envs_per_actor}")
        if self.sync_every < 1:
            raise PolicyError(f"policy {self.name}: sync_every must be >= 1, got {self.sync_every}")
        if self.advantage not in ADVANTAGE_MODES:
            raise PolicyError(f"policy {self.name}: advantage must be one of {list(ADVANTAGE_MODES)}, "
                              f"got {self.advantage!r}")
        if self.on_failure not in ("raise", "continue"):
            raise PolicyError(f"policy {self.name}: on_failure must be 'raise' or 'continue', "
                              f"got {self.on_failure!r}")
        super().validate()

    def place(self, graph: FragmentGraph) -> Placement:
        placement = super().place(graph)
        check_actor_chain(self, graph, placement)
        return placement


def check_actor_chain(policy: Policy, graph: FragmentGraph, placement: Placement) -> None:
    """Raises :class:`PolicyError` unless the ``actor`` role holds a rollout and the chain after it."""
    first = _one_rollout(policy, graph)
    on_actors = placement.nodes_of("actor")
    placed = [n for n in on_actors if n in rollout_nodes(graph)]
    if len(placed) > 1:
        raise several_rollouts(policy, placed)
    rollout = placed[0] if placed else first
    chain = [rollout, *per_env_chain(graph, rollout, per_env_only=False)]
    if len(placed) != 1 or on_actors != chain[:len(on_actors)]:
        raise PolicyError(
            f"policy {policy.name}: the actors run the rollout and, optionally, the fragments that "
            f"follow it in a chain ({' -> '.join(chain)}); placement puts {on_actors} on them")
    for name in on_actors[1:]:
        if not is_per_env(graph.fragment(name)):
            logger.warning("policy %s: %s runs on the actors, each on its own envs' batch; the "
                           "result differs from local unless it treats every env alone",
                           policy.name, name)


def check_gradient_sync(policy: Policy, graph: FragmentGraph) -> None:
    """Raises :class:`PolicyError` when no fragment of ``graph`` declares gradient sync."""
    if any(n.module.has_gradient_sync() for n in graph.nodes):
        return
    owners = [n.name for n in graph.nodes if n.module.owned_parameters()]
    raise PolicyError(
        f"policy {policy.name}: no fragment declares gradient sync, so gradients cannot be "
        f"averaged over replicas (fragments that own parameters: {owners or 'none'}); keep "
        "the optimizer in the fragment's `optimizer` attribute, or override "
        "Fragment.has_gradient_sync() and install_gradient_sync()")


@register_policy
@dataclass
class AsyncActorsPolicy(ActorsPolicy):
    """Actors run ahead on slightly stale weights; the learner takes rollouts as they arrive.

    Each learner step consumes ``batches_per_learn`` rollouts (default: one per
    actor) in arrival order. A rollout made with weights more than ``staleness``
    learner versions old is dropped (and counted). Metrics report the policy lag
    of every consumed batch. The advantage stays on the learner by default
    (``advantage="learner"``): computed there, it uses the current critic rather
    than the stale one the rollout ran with.

    Attributes:
        staleness: Largest policy lag a consumed batch may have.
        prefetch: Rollout requests in flight per actor.
        batches_per_learn: Rollouts per learner step (``None``: ``actors``).

    Example:
        >>> from torchfrag.policies import AsyncActorsPolicy
        >>> AsyncActorsPolicy(actors=2, staleness=1).staleness
        1
    """

    name: str = "async_actors"
    staleness: int = 2
    prefetch: int = 1
    batches_per_learn: int | None = None
    base_rules: list[dict[str, Any]] = field(default_factory=shipped("async_actors"))
    groups: dict[str, Any] = field(default_factory=shipped("async_actors", "groups"))
    advantage: str = "learner"

    def validate(self) -> None:
        if self.staleness < 0:
            raise PolicyError(f"policy {self.name}: staleness must be >= 0, got {self.staleness}")
        if self.prefetch < 1:
            raise PolicyError(f"policy {self.name}: prefetch must be >= 1, got {self.prefetch}")
        if self.batches_per_learn is not None and self.batches_per_learn < 1:
            raise PolicyError(f"policy {self.name}: batches_per_learn must be >= 1")
        if self.advantage == "on_arrival":
            raise PolicyError(f"policy {self.name}: advantage must be 'learner' or 'actors' "
                              "(batches are consumed as they arrive already)")
        super().validate()


@register_policy
@dataclass
class CentralInferencePolicy(Policy):
    """Env fragments on N env workers; act and learn on the learner (SEED RL style).

    Every step the learner runs the act fragment on the whole batch, sends each env
    worker its slice of the actions and gathers observations back. Actions are
    sampled in the learner, from the learner's random stream, so the run equals
    ``local`` bit for bit.

    Attributes:
        env_workers: Env worker processes (the loop's envs are split evenly).
        env_threads: Threads of each worker's env pool.

    Example:
        >>> from torchfrag.policies import CentralInferencePolicy
        >>> CentralInferencePolicy(env_workers=2).num_workers
        2
    """

    name: str = "central_inference"
    env_workers: int = 2
    base_rules: list[dict[str, Any]] = field(default_factory=shipped("central_inference"))
    env_threads: int | None = None
    groups: dict[str, Any] = field(default_factory=shipped("central_inference", "groups"))

    def validate(self) -> None:
        if self.env_workers < 1:
            raise PolicyError(f"policy {self.name}: env_workers must be >= 1, got {self.env_workers}")
        super().validate()

    def place(self, graph: FragmentGraph) -> Placement:
        _one_rollout(self, graph, env_nodes)
        placement = super().place(graph)
        if len(placement.env_split) != 1 or any(r != "learner" for r in placement.roles.values()):
            raise PolicyError(
                f"policy {self.name}: the env step of exactly one rollout goes to the env workers and "
                f"every fragment stays on the learner; the rules give env steps {placement.env_split} "
                f"and roles {placement.roles} (base_rules: {self.base_rules}, rules: {self.rules})")
        return placement


@register_policy
@dataclass
class DataParallelPolicy(Policy):
    """Every worker runs the whole loop on its own envs; gradients are all-reduced (DD-PPO).

    The driver is rank 0; ``workers - 1`` more processes join a ``gloo`` process
    group. Each learner step averages the gradients of all ranks before clipping
    and stepping, so parameters stay identical everywhere.

    Attributes:
        workers: Replicas in all (the driver included).
        backend: ``torch.distributed`` backend.
        replicate_envs: Give every replica the same envs and seed (a check of the
            all-reduce: the result then equals ``local`` bit for bit); by default
            replica ``r`` owns global envs ``r*num_envs ...`` and reseeds torch.

    Example:
        >>> from torchfrag.policies import DataParallelPolicy
        >>> DataParallelPolicy(workers=2).num_workers
        1
    """

    name: str = "data_parallel"
    workers: int = 2
    backend: str = "gloo"
    replicate_envs: bool = False
    base_rules: list[dict[str, Any]] = field(default_factory=shipped("data_parallel"))
    groups: dict[str, Any] = field(default_factory=shipped("data_parallel", "groups"))

    def validate(self) -> None:
        if self.workers < 1:
            raise PolicyError(f"policy {self.name}: workers must be >= 1, got {self.workers}")
        if self.backend not in ("gloo", "nccl", "mpi"):
            raise PolicyError(f"policy {self.name}: unknown backend {self.backend!r}")
        super().validate()

    def place(self, graph: FragmentGraph) -> Placement:
        placement = super().place(graph)
        others = {n: r for n, r in placement.roles.items() if r != "replica"}
        if others:
            raise PolicyError(f"policy {self.name}: every fragment runs on every replica; the rules "
                              f"leave {others} (base_rules: {self.base_rules}, rules: {self.rules})")
        check_gradient_sync(self, graph)
        return placement


@register_policy
@dataclass
class MultiLearnerPolicy(Policy):
    """Several learners, each with its own actors; gradients all-reduced among the learners.

    MSRL's multi-learner policy: ``learners`` learner processes (the driver is learner 0,
    ``learners - 1`` worker processes the others) each run the loop with its rollout (and
    the chain placed with it) on ``actors_per_learner`` actor processes of its own, exactly
    as under ``actors``; every fragment that declares gradient sync
    (:meth:`~torchfrag.fragments.Fragment.has_gradient_sync`, any learner fragment, not only
    ``Learn``) averages its gradients over the learners (a ``gloo`` process group of the
    learners alone) before each optimizer step, so the learners' parameters stay identical.
    The state the actors produce (running statistics) is merged into their learner, then over
    the learners. Learner ``r`` owns global envs ``r*num_envs ... (r+1)*num_envs - 1``, split
    over its actors. The placement is the ``base_rules`` of ``conf/policy/multi_learner.yaml``
    (the same as ``actors``').

    ``RunResult.extra["learner_outputs"]`` holds every learner's output of the last iteration
    (the driver's first).

    Attributes:
        learners: Learner processes (the driver included).
        actors_per_learner: Actor processes of every learner.
        envs_per_actor: Envs on each actor (``None``: the loop's envs split over a learner's actors).
        sync_every: Send the learner's weights to its actors every this many iterations.
        env_threads: Threads of each actor's env pool.
        advantage: Where the per-env fragments after the rollout run (as :class:`ActorsPolicy`).
        backend: ``torch.distributed`` backend of the learners' gradient all-reduce.
        replicate_envs: Give every learner the same envs and seeds (then, with deterministic
            actions, the run equals ``actors`` with ``actors_per_learner`` actors).

    Example:
        >>> from torchfrag.policies import MultiLearnerPolicy
        >>> MultiLearnerPolicy(learners=2, actors_per_learner=3).num_workers  # 1 learner + 6 actors
        7
    """

    name: str = "multi_learner"
    learners: int = 2
    actors_per_learner: int = 2
    envs_per_actor: int | None = None
    sync_every: int = 1
    env_threads: int | None = None
    advantage: str = "learner"
    backend: str = "gloo"
    base_rules: list[dict[str, Any]] = field(default_factory=shipped("multi_learner"))
    replicate_envs: bool = False
    groups: dict[str, Any] = field(default_factory=shipped("multi_learner", "groups"))

    def validate(self) -> None:
        for field_name in ("learners", "actors_per_learner", "sync_every"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PolicyError(f"policy {self.name}: {field_name} must be an integer >= 1, got {value!r}")
        if self.envs_per_actor is not None and self.envs_per_actor < 1:
            raise PolicyError(f"policy {self.name}: envs_per_actor must be >= 1, got {self.envs_per_actor}")
        if self.advantage not in ADVANTAGE_MODES:
            raise PolicyError(f"policy {self.name}: advantage must be one of {list(ADVANTAGE_MODES)}, "
                              f"got {self.advantage!r}")
        if self.backend not in ("gloo", "nccl", "mpi"):
            raise PolicyError(f"policy {self.name}: unknown backend {self.backend!r}; allowed: gloo, nccl, mpi")
        super().validate()

    def place(self, graph: FragmentGraph) -> Placement:
        placement = super().place(graph)
        check_actor_chain(self, graph, placement)
        check_gradient_sync(self, graph)
        return placement


@register_policy
@dataclass
class SingleDevicePolicy(Policy):
    """All fragments on one device (GPU where present), networks compiled with ``torch.compile``.

    With ``compile`` set, every *network* a fragment holds is compiled: each outermost plain
    torch module with parameters and no TensorDict module inside (an ``nn.Sequential``, a
    TorchRL ``MLP``, a user's ``nn.Module``; see
    :func:`torchfrag.runtime.placed.compile_targets`), and one log line lists them.

    Attributes:
        device_name: The device (``"cuda"`` by default; ``"cpu"`` is the
            fallback when ``fallback_cpu`` is set and CUDA is absent).
        fallback_cpu: Use the CPU when the device is absent instead of failing.

    Example:
        >>> from torchfrag.policies import SingleDevicePolicy
        >>> SingleDevicePolicy(device_name="cpu", compile=False).num_workers
        0
    """

    name: str = "single_device"
    device_name: str = "cuda"
    fallback_cpu: bool = False
    compile: bool = True

    def resolved_device(self) -> str:
        """The device that will be used (after the CPU fallback)."""
        import torch

        dev = str(self.device_name)
        if dev.startswith("cuda") and not torch.cuda.is_available() and self.fallback_cpu:
            logger.warning("single_device: %s is not available, falling back to cpu", dev)
            return "cpu"
        return dev

    def validate(self) -> None:
        check_device(self.resolved_device(), f"policy {self.name}: device_name")
        super().validate()

    def device(self, role: str) -> str:
        return self.resolved_device()


#: A role -> the executor kind that runs a placement in which the role holds nodes, for groups
#: that declare no ``executor`` (a group's own ``executor`` is the data way to say it).
ROLE_EXECUTORS: dict[str, str] = {}

#: Executor kinds, chosen from the shape of a placement (:attr:`Placement.kind`).
EXECUTOR_KINDS = ("in_process", "fused", "replicated_rollout", "async_replicated_rollout", "replicated_learners",
                  "env_calls", "replicated_loop")


@dataclass
class Placement:
    """The result of :meth:`Policy.place`: fragment node -> role, plus the policy.

    Attributes:
        policy: The policy.
        graph: The placed graph.
        roles: Node name -> role.
        env_split: Rollout node -> role of its body's env step, when a policy places the
            env step of a rollout apart from its act (central inference).
    """

    policy: Policy
    graph: FragmentGraph
    roles: dict[str, str]
    env_split: dict[str, str] = field(default_factory=dict)

    def workers(self, role: str) -> int:
        """How many processes run ``role``."""
        return self.policy.replicas(role)

    def nodes_of(self, role: str) -> list[str]:
        """Node names placed on ``role``."""
        return [n for n, r in self.roles.items() if r == role]

    def groups_holding(self) -> list[str]:
        """The groups that hold a fragment or an env step (in the policy's group order)."""
        held = set(self.roles.values()) | set(self.env_split.values())
        return [g for g in self.policy.roles if g in held]

    def option(self, key: str, default: Any = None) -> Any:
        """A setting of this placement's executor: from the ``options`` of its groups.

        The groups that hold fragments are asked first, then the driver's group; a policy class
        whose groups declare no such option falls back to its field of that name (the groups of
        every shipped policy declare theirs in its YAML).

        Example:
            >>> from torchfrag.graph import capture
            >>> from torchfrag.policies import as_policy
            >>> from torchfrag.policies.factory import PPOFactory
            >>> loop = PPOFactory("CartPole-v1", {"num_envs": 2, "steps": 4, "minibatch_size": 8})()
            >>> placement = as_policy({"name": "actors", "sync_every": 3}).place(capture(loop))
            >>> placement.option("sync_every"), placement.option("not_declared", 7)
            (3, 7)
            >>> loop.close()
        """
        options = self.options()
        return options[key] if key in options else getattr(self.policy, key, default)

    def options(self) -> dict[str, Any]:
        """Every option the groups of this placement declare (a holding group's over the driver's)."""
        from torchfrag.policies.groups import DRIVER_GROUP, policy_groups

        groups = policy_groups(self.policy)
        out: dict[str, Any] = {}
        for name in [DRIVER_GROUP, *reversed(self.groups_holding())]:
            group = groups.get(name)
            if group is not None:
                out.update(group.options)
        return out

    def declared_kind(self) -> str:
        """The executor kind the groups holding fragments declare (empty: none declares one).

        Groups naming different executors compose only when all are rollout pools
        (:func:`~torchfrag.policies.actor_pools.composed_kind`: run by ``actor_pools``, each
        pool by its own executor).

        Raises:
            PolicyError: Two of those groups declare executors that do not compose.
        """
        from torchfrag.policies.actor_pools import POOL_MEMBERS, composed_kind
        from torchfrag.policies.groups import policy_groups

        groups = policy_groups(self.policy)
        kinds = {g: groups[g].executor for g in self.groups_holding() if groups[g].executor}
        # two rollout groups are two pools even when they name the same executor
        if len(set(kinds.values())) > 1 or (len(kinds) > 1 and set(kinds.values()) <= set(POOL_MEMBERS)):
            return composed_kind(self.policy, kinds)
        return next(iter(kinds.values()), "")

    @property
    def kind(self) -> str:
        """The executor this placement needs: the one its groups declare, else from its shape.

        The groups that hold fragments name it (``executor`` of
        :mod:`torchfrag.policies.groups`: every shipped policy's YAML does). A policy whose
        groups declare none (a user's class) gets the kind its placement's shape implies:

        * ``replicated_loop``: every fragment on one replicated role that includes the driver
          (each replica, the driver too, runs the loop);
        * ``replicated_rollout`` / ``async_replicated_rollout``: a rollout (and the chain after
          it) on a replicated role, the rest on the driver; async when the policy bounds
          :attr:`Policy.asynchronous` is set;
        * ``replicated_learners``: as ``replicated_rollout``, with the learner role itself
          replicated (more than one learner process, or a policy that declares
          :attr:`Policy.replicated_learner`): every learner has its own actors and the learners
          all-reduce their gradients;
        * ``env_calls``: a rollout's env step placed on workers, its act on the driver;
        * ``fused``: everything on the driver, moved to a device or compiled;
        * ``in_process``: everything on the driver, on the CPU;
        * a role of :data:`ROLE_EXECUTORS` holding nodes: that role's executor.

        Each kind is run by the class :func:`~torchfrag.runtime.executor.executor_class` returns.
        """
        declared = self.declared_kind()
        if declared:
            return declared
        held = set(self.roles.values())
        for role, kind in ROLE_EXECUTORS.items():
            if role in held:
                return kind
        if self.roles and self._driver_runs_every_node():
            return "replicated_loop"
        if any(self.roles[n] != "learner" for n in self.roles):
            if self.policy.replicated_learner or self.workers("learner") > 1:
                return "replicated_learners"
            return "async_replicated_rollout" if self.policy.asynchronous else "replicated_rollout"
        if self.env_split:
            return "env_calls"
        if self.policy.device("learner") != "cpu" or self.policy.compile:
            return "fused"
        return "in_process"

    def _driver_runs_every_node(self) -> bool:
        """Whether every node is on one replicated role whose processes include the driver.

        That is a replicated loop (every rank, the driver too, runs the whole loop). A role of
        worker processes alone (the actors of a collection-only loop) holding every node is a
        replicated rollout with nothing left on the driver but the stub that gathers it.
        """
        roles = set(self.roles.values())
        if len(roles) != 1 or "learner" in roles:
            return False
        return self.workers(next(iter(roles))) == self.policy.num_workers + 1


def as_policy(policy: Any) -> Policy:
    """A :class:`Policy` from a name, a mapping / Hydra node with ``name``, or a policy.

    Unknown keys and unknown names raise :class:`PolicyError`.

    Example:
        >>> from torchfrag.policies import as_policy
        >>> as_policy({"name": "actors", "actors": 3}).actors
        3
        >>> as_policy("central_inference").env_workers
        2
    """
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str) and policy.endswith((".yaml", ".yml")):
        return load_policy_file(policy)
    if isinstance(policy, str):
        data: dict[str, Any] = {"name": policy}
    else:
        try:
            from omegaconf import DictConfig, OmegaConf

            if isinstance(policy, DictConfig):
                policy = OmegaConf.to_container(policy, resolve=True)
        except ImportError:  # pragma: no cover
            pass
        data = dict(policy)
    name = data.get("name", "local")
    data.pop("defaults", None)
    kind = data.get("kind") or ""
    cls = POLICY_CLASSES.get(name) or POLICY_CLASSES.get(kind)
    if cls is None and not kind and data.get("groups"):
        cls = Policy  # a policy that is data alone: its groups and rules (torchfrag.policies.groups)
    if cls is None:
        raise PolicyError(f"unknown distribution policy {name!r}" + (f" (kind {kind!r})" if kind else "")
                          + f"; available: {sorted(POLICY_CLASSES)} (a new name needs `groups:` with its "
                          "rules, `kind:` naming one of them, or a class registered with "
                          "torchfrag.policies.register_policy)")
    known = {f.name for f in fields(cls) if f.init}
    unknown = sorted(set(data) - known)
    if unknown:
        raise PolicyError(f"policy {name}: unknown option(s) {unknown}; known: {sorted(known)}")
    out = cls(**data)
    if os.environ.get("TORCHFRAG_MASTER_ADDR"):
        out.master_addr = os.environ["TORCHFRAG_MASTER_ADDR"]
    return out


def load_policy_file(path: str) -> Policy:
    """A policy from a YAML file (a user's own ``conf/policy/<name>.yaml``; ``defaults`` is ignored).

    Raises:
        PolicyError: Missing file, or what :func:`as_policy` refuses.
    """
    from omegaconf import OmegaConf

    if not os.path.isfile(path):
        raise PolicyError(f"policy file {path!r} does not exist")
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(data, dict):
        raise PolicyError(f"policy file {path!r} must hold a mapping, got {type(data).__name__}")
    data.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    return as_policy(data)
