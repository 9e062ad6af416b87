"""The loop-factory contract, checked on the driver before any worker process starts.

A policy that runs fragments on workers builds them there by calling the run's
picklable factory: ``factory(env_slice)`` with an
:class:`~torchfrag.policies.factory.EnvSlice` (or ``None`` for the whole loop) must
return the same loop with only the slice's envs. :func:`check_factory` calls the
factory once on the driver with the first worker's slice and checks that it takes
the argument and that the env count of the rollout the workers run (the placed one, which
need not be the loop's first: :func:`sliced_rollout`) equals the slice's.

Example:
    >>> from torchfrag.policies.contract import accepts_env_slice
    >>> accepts_env_slice(lambda env_slice=None: None), accepts_env_slice(lambda: None)
    (True, False)
"""
from __future__ import annotations

import contextlib
import inspect
import logging
from typing import Any

from torchfrag.graph import capture
from torchfrag.policies.base import Placement, PolicyError

logger = logging.getLogger(__name__)

__all__ = ["accepts_env_slice", "check_factory", "env_counts", "first_slice", "slice_node", "sliced_rollout"]


def accepts_env_slice(factory: Any) -> bool:
    """Whether ``factory`` can be called with one positional argument (the env slice)."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return True  # builtins and C callables: cannot tell, the call itself will say
    try:
        sig.bind(None)
    except TypeError:
        return False
    return True


def first_slice(placement: Placement, total: int) -> Any:
    """The env slice the first worker gets (``None`` when the placement gives workers no slice)."""
    import dataclasses

    from torchfrag.runtime.executor import executor_class

    sl = executor_class(placement.kind).first_slice(placement, total)
    if sl is not None and sl.node is None:
        sl = dataclasses.replace(sl, node=slice_node(placement.graph, sliced_rollout(placement)))
    return sl


def sliced_rollout(placement: Placement) -> str | None:
    """The rollout node whose envs the workers' slices divide (``None``: no worker steps an env).

    The rollout a worker role holds, else the one whose env step a role holds (central
    inference), else, for a replicated loop, the loop's first rollout with an env. An evaluation
    rollout left on the driver is never the one sliced.
    """
    from torchfrag.policies.base import rollout_nodes

    graph = placement.graph
    with_env = [n for n in rollout_nodes(graph) if getattr(graph.fragment(n), "env", None) is not None]
    placed = [n for n, r in placement.roles.items() if r != "learner"] + list(placement.env_split)
    found = [n for n in placed if n in with_env]
    if found:
        return found[0]
    return with_env[0] if with_env and placed else None


def env_counts(graph: Any) -> dict[str, int]:
    """Rollout node -> the number of envs it steps, for every rollout of ``graph`` with an env."""
    from torchfrag.policies.base import rollout_nodes

    out = {}
    for n in rollout_nodes(graph):
        env = getattr(graph.fragment(n), "env", None)
        if env is not None:
            out[n] = int(env.batch_size.numel())
    return out


def slice_node(graph: Any, node: str | None) -> str | None:
    """What :attr:`~torchfrag.policies.factory.EnvSlice.node` a worker's slice of ``node`` carries.

    ``node`` when the loop has several rollouts with an env (the factory must know which one to
    slice; the others it builds whole), else ``None`` (one rollout: nothing to choose).
    """
    return node if node is not None and len(env_counts(graph)) > 1 else None


def check_factory(factory: Any, placement: Placement, total: int | None, node: str | None = None) -> None:
    """Raises :class:`PolicyError` when ``factory`` breaks the contract (see the module docstring).

    Args:
        factory: The run's loop factory.
        placement: The placement (its kind says which slice the first worker gets).
        total: Envs of the driver's rollout ``node`` (``None``: no env to slice; only the
            signature is checked).
        node: The rollout the workers' slices divide (:func:`sliced_rollout` when ``None``).
    """
    name = placement.policy.name
    if not accepts_env_slice(factory):
        raise PolicyError(
            f"policy {name}: the loop factory {factory!r} must take the env slice: "
            "def factory(env_slice=None) -> loop, building only env_slice.count envs "
            "(env_slice.offset ... of env_slice.total) when it is given")
    if total is None:
        return
    sl = first_slice(placement, total)
    node = node or sliced_rollout(placement)
    if sl is None or node is None:
        return
    try:
        loop = factory(sl)
    except Exception as err:  # noqa: BLE001 - reported with the contract
        raise PolicyError(f"policy {name}: the loop factory failed when called with {sl} ({err!r}); "
                          "it must build the loop for that env slice") from None
    try:
        counts = env_counts(capture(loop))
    finally:
        close = getattr(loop, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()
    got = counts.get(node)
    if got is not None and got != sl.count:
        raise PolicyError(
            f"policy {name}: the loop factory ignores its env slice: called with {sl} it built "
            f"rollout {node!r} over {got} envs, not {sl.count}; build env_slice.count envs (seeded with "
            "torchfrag.policies.factory.slice_seeds(seed, env_slice)) when env_slice is given")
    whole = env_counts(placement.graph)
    for other, count in counts.items():
        if other != node and other in whole and count != whole[other]:
            raise PolicyError(
                f"policy {name}: the loop factory sliced the wrong rollout: called with {sl} it built "
                f"rollout {other!r} over {count} envs, not its {whole[other]}, while the workers' slice "
                f"divides rollout {node!r} (env_slice.node); slice the rollout env_slice.node names and "
                "build the others whole")
