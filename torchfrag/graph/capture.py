"""Tracing a loop module into a :class:`~torchfrag.graph.FragmentGraph` with torch.fx."""
from __future__ import annotations

import contextlib
import logging
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch.fx as fx
from tensordict import TensorDict
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from torchfrag.graph.errors import CaptureError, user_location

logger = logging.getLogger(__name__)

__all__ = ["FragmentTracer", "capture", "GLUE_METHODS"]

#: TensorDict methods allowed between fragments (they only select keys).
GLUE_METHODS = frozenset({"select", "exclude"})

#: TensorDict/tensor methods that change their receiver: data written this way
#: does not show up as a dataflow edge, so capture refuses them.
MUTATING_METHODS = frozenset({
    "set", "set_", "set_at_", "update", "update_", "update_at_", "setdefault", "__setitem__",
    "copy_", "zero_", "fill_", "apply_", "rename_key_", "del_", "pop", "add_", "mul_", "clamp_",
    "masked_fill_", "data_", "unlock_", "lock_",
})

_FIX_CONTROL_FLOW = (
    "move the loop or branch into a fragment (time loops: torchfrag.fragments.Rollout; "
    "any other logic: a Fragment subclass whose forward holds it)"
)


class _FragmentProxy(fx.Proxy):
    """An fx proxy that refuses in-place writes with a clear message."""

    def __setitem__(self, key: Any, value: Any) -> None:
        raise CaptureError(
            f"in-place write td[{key!r}] = ... inside a captured loop hides a data dependency",
            user_location(),
            "compute the value inside a fragment and return the TensorDict from it "
            "(`td = self.frag(td)`)",
        )

    def __delitem__(self, key: Any) -> None:
        raise CaptureError(
            f"in-place deletion del td[{key!r}] inside a captured loop", user_location(),
            "use `td = td.exclude(key)`",
        )


class FragmentTracer(fx.Tracer):
    """A torch.fx tracer for which every fragment (any ``TensorDictModuleBase``) is a leaf.

    It also refuses what cannot be captured faithfully: Python control flow on
    traced values, iteration over them, in-place writes and TensorDict
    construction from traced values, each with the offending line.
    """

    def __init__(self) -> None:
        super().__init__()
        self.record_stack_traces = True

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if isinstance(m, TensorDictModuleBase):
            return True
        return super().is_leaf_module(m, module_qualified_name)

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return _FragmentProxy(node, self)

    def to_bool(self, obj: fx.Proxy) -> bool:
        raise CaptureError(
            "Python control flow (if/while/bool/assert) on a traced value cannot be captured: "
            "its outcome is only known when the loop runs",
            user_location(), _FIX_CONTROL_FLOW,
        )

    def iter(self, obj: fx.Proxy) -> Iterator:
        raise CaptureError(
            "iterating over a traced value (for-loop, list(), unpacking of unknown length) "
            "cannot be captured", user_location(), _FIX_CONTROL_FLOW,
        )

    def create_proxy(self, kind: str, target: Any, args: tuple, kwargs: dict,
                     name: str | None = None, type_expr: Any = None,
                     proxy_factory_fn: Any = None) -> fx.Proxy:
        if kind == "call_method" and target in MUTATING_METHODS:
            raise CaptureError(
                f"in-place method .{target}() on a traced TensorDict hides a data dependency",
                user_location(),
                "do the update inside a fragment and rebind its result (`td = self.frag(td)`)",
            )
        return super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)


def _contains_proxy(obj: Any, depth: int = 0) -> bool:
    if isinstance(obj, fx.Proxy):
        return True
    if depth > 4:
        return False
    if isinstance(obj, Mapping):
        return any(_contains_proxy(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_contains_proxy(v, depth + 1) for v in obj)
    return False


@contextlib.contextmanager
def _refuse_tensordict_from_proxies() -> Iterator[None]:
    """Patches TensorDict construction so building one from traced values fails clearly."""
    orig_init = TensorDict.__init__
    orig_from_dict = TensorDict.__dict__.get("from_dict")

    def _refuse() -> None:
        raise CaptureError(
            "constructing a TensorDict from traced values inside a captured loop is not "
            "supported: fx cannot see into the new TensorDict",
            user_location(),
            "build the TensorDict inside a fragment's forward, or pass data between "
            "fragments as the TensorDicts they return",
        )

    def init(self: TensorDict, *args: Any, **kwargs: Any) -> None:
        if _contains_proxy(args) or _contains_proxy(kwargs):
            _refuse()
        orig_init(self, *args, **kwargs)

    def from_dict(*args: Any, **kwargs: Any) -> Any:
        if _contains_proxy(args) or _contains_proxy(kwargs):
            _refuse()
        return orig_from_dict.__get__(None, TensorDict)(*args, **kwargs)

    TensorDict.__init__ = init  # type: ignore[method-assign]
    if orig_from_dict is not None:
        TensorDict.from_dict = from_dict  # type: ignore[method-assign]
    try:
        yield
    finally:
        TensorDict.__init__ = orig_init  # type: ignore[method-assign]
        if orig_from_dict is not None:
            TensorDict.from_dict = orig_from_dict  # type: ignore[method-assign]


def capture(
    loop: nn.Module,
    in_keys: Sequence[NestedKey] | Mapping[str, Sequence[NestedKey]] | None = None,
    *,
    name: str | None = None,
) -> Any:
    """Captures ``loop.forward`` as a :class:`~torchfrag.graph.FragmentGraph`.

    Every fragment call becomes one graph node, annotated with its read and
    written keys, its impurity and the parameters/state it shares with other
    fragments. Between fragments only ``select``/``exclude`` and the
    unpacking of a fragment's tuple output may appear; everything else
    belongs inside a fragment.

    Args:
        loop: A module whose ``forward`` calls fragments in functional style
            (``td = self.act(td)``).
        in_keys: Keys the loop's TensorDict input supplies (a mapping
            ``argument name -> keys`` for several inputs). Defaults to
            ``loop.in_keys`` when the loop has it; an input with no declared
            keys supplies none.
        name: Graph name; defaults to the loop's class name.

    Returns:
        The captured :class:`~torchfrag.graph.FragmentGraph`.

    Raises:
        CaptureError: The loop cannot be captured (the message names the line and the fix).
        MissingKeyError: A fragment reads a key that is neither produced upstream nor an input.

    Example:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchfrag import capture
        >>> from torchfrag.fragments import wrap
        >>> class Loop(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.f = wrap(TensorDictModule(torch.nn.Linear(2, 2), ["x"], ["y"]))
        ...         self.g = wrap(TensorDictModule(torch.nn.Linear(2, 1), ["y"], ["z"]))
        ...     def forward(self, td):
        ...         td = self.f(td)
        ...         return self.g(td)
        >>> graph = capture(Loop(), in_keys=["x"])
        >>> [n.name for n in graph.nodes]
        ['f', 'g']
        >>> graph.edges[1].keys
        ('y',)
    """
    from torchfrag.graph.fragment_graph import FragmentGraph

    tracer = FragmentTracer()
    with _refuse_tensordict_from_proxies():
        try:
            graph = tracer.trace(loop)
        except CaptureError:
            raise
        except fx.proxy.TraceError as err:  # pragma: no cover - fx variants we did not map
            raise CaptureError(f"torch.fx could not trace the loop: {err}", user_location(),
                               _FIX_CONTROL_FLOW) from err
        except TypeError as err:
            if "Proxy" in str(err):
                raise CaptureError(f"a traced value was used where a concrete one is needed: {err}",
                                   user_location(), _FIX_CONTROL_FLOW) from err
            raise
    gm = fx.GraphModule(loop, graph, class_name=type(loop).__name__ + "Graph")
    if in_keys is None:
        in_keys = getattr(loop, "in_keys", None)
    return FragmentGraph(gm, loop, in_keys, name=name or type(loop).__name__)


def is_glue(node: fx.Node) -> bool:
    """Whether ``node`` is allowed glue between fragments (key selection, tuple unpacking)."""
    if node.op == "call_method" and node.target in GLUE_METHODS:
        return True
    return (node.op == "call_function" and node.target is operator.getitem
            and isinstance(node.args[1], int))
