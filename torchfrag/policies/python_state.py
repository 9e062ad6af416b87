"""State held in plain Python numbers, which placement cannot sync: found and reported before a run.

Shared state travels between processes as tensors (parameters, buffers,
:meth:`~torchfrag.fragments.Fragment.shared_state`). An ``int`` or ``float``
attribute that a fragment changes as it runs (a temperature decayed in
``forward``) does not: each process keeps its own copy, silently.

The rule (static, no fragment is called): for a placement that runs fragments in
worker processes, an attribute ``self.<path>`` assigned (``=``, ``+=``, ...) in a
fragment's ``forward``, or in a method of the fragment that ``forward`` calls on
``self``, whose current value is an ``int`` or ``float`` (not ``bool``), is
reported when

* the fragment runs on a worker role (any role but the driver's ``learner``): its
  updates happen in worker processes, never on the driver; or
* the object holding the attribute also belongs to a fragment placed on another
  role (a learner decaying the actor's ``temperature``).

A fragment declares the attributes that are deliberately per process (counters
such as ``Rollout.frames``) in :attr:`~torchfrag.fragments.Fragment.local_state`;
they are not reported. Attributes written outside these methods (through
``setattr``, by a helper function, by another object) are not seen.

Buffers follow the same rule where nothing carries them (:func:`unsynced_buffers`): a
registered buffer a fragment changes in ``forward`` (assigned, ``self.n += 1``, an in-place
call such as ``self.n.add_(1)``, an item write) is reported when

* the fragment runs on a worker role and the buffer is not in its
  :meth:`~torchfrag.fragments.Fragment.produced_state` (the state placement merges back
  into the driver's copy): the driver's copy never changes; or
* the fragment runs on the driver and a fragment on another role holds the buffer's module
  without carrying it in its :meth:`~torchfrag.fragments.Fragment.shared_state` (a module
  that fragment neither owns nor reads): that role never sees the change.

Example:
    >>> import torch
    >>> from torchfrag.fragments import Fragment
    >>> from torchfrag.policies.python_state import number_writes
    >>> class Anneal(Fragment):
    ...     def __init__(self):
    ...         super().__init__(["x"], ["x"])
    ...         self.temperature = 1.0
    ...     def forward(self, td):
    ...         self.temperature *= 0.9
    ...         return td
    >>> [(w.path, w.type_name) for w in number_writes(Anneal())]
    [('temperature', 'float')]
"""
from __future__ import annotations

import ast
import inspect
import logging
import textwrap
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from torchfrag.graph import FragmentGraph
from torchfrag.policies.base import Placement

logger = logging.getLogger(__name__)

__all__ = ["UnsyncedStateWarning", "NumberWrite", "buffer_writes", "number_writes", "unsynced_buffers",
           "unsynced_python_state", "warn_unsynced_python_state"]

#: The role of the driver process.
DRIVER_ROLE = "learner"


class UnsyncedStateWarning(UserWarning):
    """A fragment changes state (a plain Python number, a buffer) that the placement cannot sync."""


@dataclass(frozen=True)
class NumberWrite:
    """An ``int``/``float`` attribute (or a buffer) a fragment changes as it runs.

    Attributes:
        path: The attribute, from the fragment (``temperature``, ``actor.temperature``).
        type_name: ``int``, ``float`` or ``buffer``.
        owner: The object holding the attribute.
        value: Its current value.
    """

    path: str
    type_name: str
    owner: Any = field(repr=False, compare=False)
    value: Any = field(default=None, repr=False, compare=False)


def _source_tree(func: Any) -> ast.AST | None:
    """The parsed source of ``func``; ``None`` when it has none (builtins, a REPL)."""
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        logger.debug("no source for %r: its Python-number writes are not checked", func)
        return None


def _self_path(node: ast.AST) -> str | None:
    """``"a.b"`` for the expression ``self.a.b``; ``None`` for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "self" and parts:
        return ".".join(reversed(parts))
    return None


def _assigned_targets(tree: ast.AST) -> Iterator[ast.AST]:
    """Every assignment target in ``tree`` (tuples unpacked)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        while targets:
            t = targets.pop()
            if isinstance(t, (ast.Tuple, ast.List)):
                targets.extend(t.elts)
            else:
                yield t


def _called_methods(tree: ast.AST, cls: type) -> set[str]:
    """Names of the methods of ``cls`` that ``tree`` calls as ``self.<name>(...)``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            path = _self_path(node.func)
            if path and "." not in path and \
                    inspect.isfunction(inspect.getattr_static(cls, path, None)):
                out.add(path)
    return out


def _run_trees(cls: type) -> list[ast.AST]:
    """The parsed ``forward`` of ``cls`` and the methods it calls on ``self``, transitively."""
    trees, todo, seen = [], ["forward"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        tree = _source_tree(getattr(cls, name, None))
        if tree is not None:
            trees.append(tree)
            todo.extend(_called_methods(tree, cls))
    return trees


def _resolve(root: Any, path: str) -> tuple[Any, Any]:
    """``(owner, value)`` of ``root.<path>``; ``(None, None)`` when a part is missing."""
    *parents, attr = path.split(".")
    owner = root
    for part in parents:
        owner = getattr(owner, part, None)
        if owner is None:
            return None, None
    return owner, getattr(owner, attr, None)


def _written_paths(tree: ast.AST) -> Iterator[str]:
    """``"a.b"`` for every ``self.a.b`` that ``tree`` assigns, item-assigns or changes in place."""
    for target in _assigned_targets(tree):
        path = _self_path(target.value if isinstance(target, ast.Subscript) else target)
        if path is not None:
            yield path
    for node in ast.walk(tree):  # torch's in-place methods: self.n.add_(1), self.n.copy_(x)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr.endswith("_") and not node.func.attr.startswith("_"):
            path = _self_path(node.func.value)
            if path is not None:
                yield path


def _writes(fragment: nn.Module, keep: Any) -> list[NumberWrite]:
    """The attributes ``fragment`` changes as it runs whose ``(owner, attr, value)`` ``keep``
    names a type for (less its ``local_state``)."""
    local = set(getattr(fragment, "local_state", ()))
    found: dict[str, NumberWrite] = {}
    for tree in _run_trees(type(fragment)):
        for path in _written_paths(tree):
            if path in local or path in found:
                continue
            owner, value = _resolve(fragment, path)
            type_name = keep(owner, path.rsplit(".", 1)[-1], value)
            if type_name:
                found[path] = NumberWrite(path, type_name, owner, value)
    return list(found.values())


def number_writes(fragment: nn.Module) -> list[NumberWrite]:
    """The Python-number attributes ``fragment`` assigns as it runs, less its ``local_state``."""
    return _writes(fragment, lambda _owner, _attr, value: type(value).__name__
                   if isinstance(value, (int, float)) and not isinstance(value, bool) else None)


def buffer_writes(fragment: nn.Module) -> list[NumberWrite]:
    """The registered buffers ``fragment`` changes as it runs, less its ``local_state``.

    Example:
        >>> import torch
        >>> from torchfrag.fragments import Fragment
        >>> class Count(Fragment):
        ...     def __init__(self):
        ...         super().__init__(["x"], ["x"])
        ...         self.register_buffer("seen", torch.zeros((), dtype=torch.int64))
        ...     def forward(self, td):
        ...         self.seen.add_(td.numel())
        ...         return td
        >>> [(w.path, w.type_name) for w in buffer_writes(Count())]
        [('seen', 'buffer')]
    """
    return _writes(fragment, lambda owner, attr, value: "buffer"
                   if isinstance(owner, nn.Module) and attr in owner._buffers
                   and owner._buffers[attr] is value and value is not None else None)


def _placed_fragments(placement: Placement) -> Iterator[tuple[str, str, nn.Module]]:
    """``(name, role, fragment)`` for every fragment, the bodies of higher-order ones included."""
    graph: FragmentGraph = placement.graph
    for node in graph.nodes:
        role = placement.roles.get(node.name, DRIVER_ROLE)
        yield node.name, role, node.module
        body = graph.subgraphs.get(node.name)
        for inner in body.nodes if body is not None else ():
            yield f"{node.name}/{inner.name}", role, inner.module


def _shared_with_other_role(owner: Any, role: str, placement: Placement) -> str | None:
    """A node on a role other than ``role`` whose fragment holds ``owner``, if any."""
    for node in placement.graph.nodes:
        other = placement.roles.get(node.name, DRIVER_ROLE)
        if other != role and any(m is owner for m in node.module.modules()):
            return node.name
    return None


def unsynced_python_state(placement: Placement) -> list[str]:
    """One message per Python-number attribute the placement leaves unsynced (see the module)."""
    if placement.kind in ("in_process", "fused"):
        return []
    out = []
    for name, role, fragment in _placed_fragments(placement):
        for write in number_writes(fragment):
            shared = _shared_with_other_role(write.owner, role, placement)
            if role == DRIVER_ROLE and shared is None:
                continue
            where = (f"it runs on the {role!r} workers" if role != DRIVER_ROLE else
                     f"fragment {shared!r} on another process holds the same object")
            out.append(_message(placement, name, write, where))
    return out


def _carries(fragment: nn.Module, value: Any, produced: bool) -> bool:
    """Whether ``fragment``'s produced (or shared) state holds the tensor ``value`` itself."""
    method = "produced_state" if produced else "shared_state"
    state = getattr(fragment, method, None)
    return callable(state) and any(v is value for v in state().values())


def unsynced_buffers(placement: Placement) -> list[str]:
    """One message per buffer changed in ``forward`` that the placement never carries (see the module)."""
    if placement.kind in ("in_process", "fused"):
        return []
    out = []
    for name, role, fragment in _placed_fragments(placement):
        for write in buffer_writes(fragment):
            if role != DRIVER_ROLE:
                if not _carries(fragment, write.value, produced=True):
                    out.append(_buffer_message(placement, name, write, (
                        f"it runs on the {role!r} workers, and the driver's copy never changes "
                        "(nothing merges it back)"),
                        "return it from the fragment's produced_state() (replicas' changes are "
                        "merged into the driver's copy) or keep the fragment on the driver"))
                continue
            for node in placement.graph.nodes:
                other = placement.roles.get(node.name, DRIVER_ROLE)
                if other != DRIVER_ROLE and any(m is write.owner for m in node.module.modules()) \
                        and not _carries(node.module, write.value, produced=False):
                    out.append(_buffer_message(placement, name, write, (
                        f"fragment {node.name!r} on the {other!r} workers holds it without owning "
                        "or reading its module, so it never gets the change"),
                        f"declare the module in {node.name!r}'s reads= (or owns=), so that its "
                        "state follows the driver's"))
                    break
    return out


def _buffer_message(placement: Placement, name: str, write: NumberWrite, where: str, fix: str) -> str:
    return (f"policy {placement.policy.name}: fragment {name!r} changes the buffer self.{write.path} "
            f"in forward and {where}. Fix: {fix}")


def _message(placement: Placement, name: str, write: NumberWrite, where: str) -> str:
    attr = write.path.rsplit(".", 1)[-1]
    return (
        f"policy {placement.policy.name}: fragment {name!r} changes self.{write.path} (a Python "
        f"{write.type_name}) in forward and {where}: Python numbers are not synced between "
        f"processes. Fix: make it a buffer (register_buffer({attr!r}, torch.tensor(...)), "
        "updated in place), or declare it per process in the fragment's local_state")


def warn_unsynced_python_state(placement: Placement) -> list[str]:
    """Issues one :class:`UnsyncedStateWarning` per :func:`unsynced_python_state` and
    :func:`unsynced_buffers` message.

    Returns:
        The messages.
    """
    messages = unsynced_python_state(placement) + unsynced_buffers(placement)
    for msg in messages:
        warnings.warn(msg, UnsyncedStateWarning, stacklevel=3)
    return messages
