"""Worker groups: the named sets of processes a policy places fragments on.

A policy declares its groups as data, in the ``groups`` mapping of its YAML (or its
``groups`` field)::

    groups:
      actor: {size: actors, executor: replicated_rollout}   # size: a policy field, read at use
      replay: {size: 1, device: cpu, executor: replay}
      learner: {options: {sync_every: 2}}                    # what its executor reads

Each group has

* ``size``: its processes: an integer, the name of one of the policy's integer fields
  (``actors``: so ``policy.actors=4`` on the command line resizes the group), or a list of
  those multiplied (``[learners, actors_per_learner]``);
* ``device`` (optional): the device its fragments run on (else ``devices[<group>]``, else
  ``devices.default``, else ``cpu``);
* ``executor`` (optional): the executor kind that runs a placement in which this group holds
  fragments (a kind of :func:`torchfrag.runtime.executor.executor_class`); groups that hold
  fragments must agree on it. Left out, the kind follows from the placement's shape;
* ``driver`` (optional, ``false``): the group's first member is the driver process (a
  replicated loop's ``replica`` group, the learners of ``multi_learner``);
* ``options`` (optional): the settings its executor reads (``sync_every``, ``staleness``,
  ``envs_per_actor``, ...), name -> value; a value that is a string naming one of the
  policy's fields is that field's value, read at use (``sync_every: sync_every``, so
  ``policy.sync_every=2`` on the command line reaches the executor). An executor reads them
  with :meth:`~torchfrag.policies.Placement.option`, never from the policy's fields, so a
  policy written only in YAML configures any executor.

The driver is the group ``learner`` (size 1, ``driver: true``), present even when not
declared. Rules (:mod:`torchfrag.policies.rules`) put fragments on groups by their ``role``
key; :attr:`~torchfrag.policies.Placement.kind` reads the executor from the groups that hold
fragments, not from the policy's class.

Example:
    >>> from torchfrag.policies import as_policy
    >>> from torchfrag.policies.groups import policy_groups
    >>> g = policy_groups(as_policy({"name": "actors", "actors": 3}))
    >>> g["actor"].size, g["actor"].executor, g["learner"].driver
    (3, 'replicated_rollout', True)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DRIVER_GROUP", "GROUP_KEYS", "Group", "check_groups", "executor_kinds", "policy_groups"]

#: The group of the driver process.
DRIVER_GROUP = "learner"
#: The keys a group's mapping may hold.
GROUP_KEYS = ("size", "device", "executor", "driver", "options")


@dataclass(frozen=True)
class Group:
    """One resolved worker group.

    Attributes:
        name: The group's name (what rules' ``role`` and ``placement`` values name).
        size: Processes in the group (the driver included when ``driver``).
        device: Device of its fragments.
        executor: The executor kind its placements need (empty: from the placement's shape).
        driver: Whether the driver process is the group's first member.
        options: What its executor reads (policy field names resolved to their values).
    """

    name: str
    size: int
    device: str
    executor: str
    driver: bool
    options: dict[str, Any] = field(default_factory=dict)


def executor_kinds() -> set[str]:
    """Every executor kind that can run a placement (registered or built in)."""
    from torchfrag.runtime.executor import BUILTIN, EXECUTORS

    return set(EXECUTORS) | set(BUILTIN)


def _size(policy: Any, name: str, size: Any) -> int:
    """``size`` resolved: an int, a policy field's value, or the product of a list of those."""
    from torchfrag.policies.base import PolicyError

    parts = size if isinstance(size, (list, tuple)) else [size]
    out = 1
    for part in parts:
        value = part
        if isinstance(part, str):
            if not hasattr(policy, part):
                raise PolicyError(f"policy {policy.name}: group {name!r} takes its size from field "
                                  f"{part!r}, which the policy does not have")
            value = getattr(policy, part)
        if isinstance(value, bool) or not isinstance(value, int):
            raise PolicyError(f"policy {policy.name}: group {name!r} needs an integer size, got "
                              f"{part!r} = {value!r}")
        out *= value
    return out


def _options(policy: Any, name: str, options: Any) -> dict[str, Any]:
    """A group's ``options`` resolved: a string naming a policy field is that field's value."""
    from torchfrag.policies.base import PolicyError

    if options is None:
        return {}
    if not hasattr(options, "items"):
        raise PolicyError(f"policy {policy.name}: options of group {name!r} must be a mapping of "
                          f"setting -> value, got {options!r}")
    fields_ = {f for f in getattr(policy, "__dataclass_fields__", {})}
    return {str(k): getattr(policy, v) if isinstance(v, str) and v in fields_ else v for k, v in options.items()}


def policy_groups(policy: Any) -> dict[str, Group]:
    """The policy's groups, resolved (the driver group ``learner`` first, always present).

    Raises:
        PolicyError: A group that is not a mapping, has unknown keys or a size that is not an
            integer (sizes < 1 and unknown executors are :func:`check_groups`'s).
    """
    from torchfrag.policies.base import PolicyError

    declared = dict(policy.declared_groups())
    declared.setdefault(DRIVER_GROUP, {})
    out: dict[str, Group] = {}
    for name in [DRIVER_GROUP, *(n for n in declared if n != DRIVER_GROUP)]:
        spec = declared[name]
        if spec is None:
            spec = {}
        if not hasattr(spec, "items"):
            raise PolicyError(f"policy {policy.name}: group {name!r} must be a mapping with keys "
                              f"{list(GROUP_KEYS)}, got {spec!r}")
        spec = dict(spec)
        unknown = sorted(set(spec) - set(GROUP_KEYS))
        if unknown:
            raise PolicyError(f"policy {policy.name}: group {name!r} has unknown key(s) {unknown}; "
                              f"known: {list(GROUP_KEYS)}")
        driver = bool(spec.get("driver", name == DRIVER_GROUP))
        dev = spec.get("device") or policy.devices.get(name, policy.devices.get("default", "cpu"))
        out[str(name)] = Group(str(name), _size(policy, name, spec.get("size", 1)), str(dev),
                               str(spec.get("executor") or ""), driver,
                               _options(policy, name, spec.get("options")))
    return out


def check_groups(policy: Any) -> None:
    """Raises :class:`~torchfrag.policies.PolicyError` (one line) for a group that cannot run.

    A size below 1, an executor kind no class runs, a second group holding the driver.
    """
    from torchfrag.policies.base import PolicyError, check_device

    groups = policy_groups(policy)
    kinds = None
    drivers = [g.name for g in groups.values() if g.driver]
    if len(drivers) > 2 or (len(drivers) == 2 and DRIVER_GROUP in policy.declared_groups()):
        raise PolicyError(f"policy {policy.name}: groups {drivers} all claim the driver process "
                          "(driver: true); one group holds it")
    for g in groups.values():
        if g.size < 1:
            raise PolicyError(f"policy {policy.name}: group {g.name!r} has size {g.size}; a group needs "
                              "at least one process (remove the group or its rules instead)")
        if g.executor:
            kinds = kinds if kinds is not None else executor_kinds()
            if g.executor not in kinds:
                raise PolicyError(f"policy {policy.name}: group {g.name!r} names executor kind "
                                  f"{g.executor!r}, which no executor runs; known: {sorted(kinds)}")
        check_device(g.device, f"policy {policy.name}: device of group {g.name!r}")
