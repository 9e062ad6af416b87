"""The captured graph of a loop: :class:`FragmentGraph`, its nodes and edges."""
from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.fx as fx
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey, unravel_key
from torch import nn

from torchfrag.graph.capture import is_glue
from torchfrag.graph.errors import CaptureError, MissingKeyError, location_from_stack_trace

logger = logging.getLogger(__name__)

__all__ = ["FragmentGraph", "FragmentNode", "DataEdge", "SharedEdge", "key_str"]

Key = tuple[str, ...]


def _k(key: NestedKey) -> Key:
    key = unravel_key(key)
    return (key,) if isinstance(key, str) else tuple(key)


def key_str(key: NestedKey) -> str:
    """``("next", "reward")`` -> ``"next.reward"``."""
    return ".".join(_k(key))


def _flatten_keys(args: Sequence[Any]) -> list[NestedKey]:
    out: list[NestedKey] = []
    for a in args:
        if isinstance(a, list):
            out.extend(a)
        elif isinstance(a, (str, tuple)):
            out.append(a)
    return out


def _has(avail: Mapping[Key, str], key: Key) -> str | None:
    """Producer of ``key`` in ``avail`` (also matching a whole sub-tree or a parent entry)."""
    if key in avail:
        return avail[key]
    for k, src in avail.items():
        n = min(len(k), len(key))
        if k[:n] == key[:n]:
            return src
    return None


@dataclass(frozen=True)
class _CallInput:
    """One TensorDict argument of a fragment call.

    Attributes:
        slot: Argument position (``int``) or keyword (``str``).
        value: The traced value passed (an fx node), or a constant.
        keys: Keys it carries -> name of their producer; ``None`` when unknown.
    """

    slot: int | str
    value: Any
    keys: dict[Key, str] | None

    def describe(self) -> str:
        """``argument 1 (b)`` / ``keyword argument 'other' (b)``."""
        if isinstance(self.slot, int):
            what = f"argument {self.slot}"
        else:
            what = f"keyword argument {self.slot!r}"
        name = getattr(self.value, "name", None)
        return f"{what} ({name})" if name else what


def _call_inputs(node: fx.Node, avail: Mapping[Any, Any], loc: Any) -> list[_CallInput]:
    """The TensorDict arguments of fragment call ``node`` (positional, then keyword) and their keys.

    A call that passes no traced value reads from nothing (no argument) or from a
    constant whose keys are unknown.
    """
    slots: list[tuple[int | str, Any]] = [
        (i, a) for i, a in enumerate(node.args) if isinstance(a, fx.Node)]
    slots += [(k, v) for k, v in node.kwargs.items() if isinstance(v, fx.Node)]
    if not slots:
        arg = node.args[0] if node.args else None
        return [_CallInput(0, arg, {} if arg is None else None)]
    out = []
    for slot, value in slots:
        keys = avail.get(value)
        if isinstance(keys, list):
            raise CaptureError(
                f"{node.target} received the whole tuple returned by a multi-output fragment",
                loc, "unpack it first: `a, b = self.frag(td)`")
        out.append(_CallInput(slot, value, keys))
    return out


def _planned_reads(node: fx.Node, mod: TensorDictModuleBase, inputs: list[_CallInput],
                   loc: Any) -> list[tuple[Key, list[_CallInput]]]:
    """Each key the call reads with the arguments that may supply it.

    Keys declared per argument (``arg_in_keys``) come from that argument; otherwise
    any argument may supply any of ``in_keys``.
    """
    declared = getattr(mod, "arg_in_keys", None)
    if declared is None:
        return [(_k(key), inputs) for key in mod.in_keys]
    by_slot = {i.slot: i for i in inputs}
    unknown = [slot for slot in declared if slot not in by_slot]
    if unknown:
        raise CaptureError(
            f"fragment {node.target!r} declares keys for arguments {unknown} in arg_in_keys, "
            f"but this call passes TensorDicts as arguments {list(by_slot)}",
            loc,
            "pass every TensorDict the fragment reads, or fix its arg_in_keys",
        )
    return [(_k(key), [by_slot[slot]]) for slot, keys in declared.items() for key in keys]


def _supplier(candidates: list[_CallInput], key: Key) -> str | None:
    """Producer of ``key`` in the first candidate argument that carries it (``None``: none does)."""
    for c in candidates:
        src = _has(c.keys, key) if c.keys is not None else None
        if src is not None:
            return src
    return None


def _check_reads(node: fx.Node, mod: TensorDictModuleBase, inputs: list[_CallInput],
                 loc: Any) -> dict[str, list[str]]:
    """Checks that the call's arguments supply every key it reads; producer -> keys read from it.

    Raises:
        MissingKeyError: No candidate argument supplies a key (keys of an argument
            that are unknown at capture are not checked).
    """
    producers: dict[str, list[str]] = {}
    for key, candidates in _planned_reads(node, mod, inputs, loc):
        src = _supplier(candidates, key)
        if src is not None:
            producers.setdefault(src, []).append(key_str(key))
        elif all(c.keys is not None for c in candidates):
            raise _missing_key(node, key, candidates, several=len(inputs) > 1, loc=loc)
    return producers


def _missing_key(node: fx.Node, key: Key, candidates: list[_CallInput], several: bool,
                 loc: Any) -> MissingKeyError:
    """The error for ``key``, read by ``node`` and supplied by none of ``candidates``."""
    known = ", ".join(sorted({key_str(k) for c in candidates for k in c.keys or {}})) or "none"
    where = ""
    if several:
        where = " from " + (
            candidates[0].describe() if len(candidates) == 1 else
            "any of its TensorDict arguments " + ", ".join(c.describe() for c in candidates))
    return MissingKeyError(
        f"fragment {node.target!r} reads key {key_str(key)!r}{where}, which no upstream "
        f"fragment writes and no input supplies (available: {known})",
        loc,
        "produce the key in an earlier fragment, or declare it as an input: "
        "capture(loop, in_keys=[...])" + (
            "; a fragment taking several TensorDicts says which keys it reads from each with "
            "Fragment(arg_in_keys=...)" if several else ""),
    )


@dataclass
class FragmentNode:
    """One fragment call in a :class:`FragmentGraph`.

    Attributes:
        name: The fx node name (unique in the graph).
        target: Qualified name of the fragment module in the loop.
        kind: Human description of the fragment (``Act(ProbabilisticActor, random)``).
        in_keys: Keys read.
        out_keys: Keys written.
        impure: Whether the call has side effects (never eliminated).
        inputs: Names of the nodes (or graph inputs) whose output it takes.
        location: ``(path, line, code)`` of the call in the loop's source.
    """

    name: str
    target: str
    kind: str
    in_keys: tuple[Key, ...]
    out_keys: tuple[Key, ...]
    impure: bool
    inputs: tuple[str, ...]
    location: tuple[str, int, str] | None
    module: nn.Module = field(repr=False, compare=False, default=None)


@dataclass(frozen=True)
class DataEdge:
    """Data flowing from ``src`` to ``dst``: the ``keys`` ``dst`` reads that ``src`` wrote.

    An edge with no keys only orders the two calls (``dst`` takes ``src``'s output).
    """

    src: str
    dst: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class SharedEdge:
    """State shared by two fragments, found from object identity.

    ``kind="weights"``: ``src`` owns (updates) parameters that ``dst`` reads;
    when the two are placed apart this becomes a weight-sync edge.
    ``kind="state"``: both use the same env/buffer object.
    """

    src: str
    dst: str
    kind: str
    tensors: int
    numel: int


class FragmentGraph:
    """A loop captured by :func:`torchfrag.capture`: fragments as nodes, TensorDicts as edges.

    Call it like the loop (``graph(*inputs)``), print it for a table, draw it
    with :meth:`to_dot`/:meth:`render`, split it with :meth:`split`.

    Attributes:
        module: The :class:`torch.fx.GraphModule` that runs the loop.
        nodes: The fragment calls, in execution order.
        edges: Data edges between fragments (and from the graph inputs, named ``input:<arg>``).
        shared: Shared-parameter (weight-sync) and shared-state edges.
        inputs: Graph input name -> supplied keys.
        subgraphs: Captured bodies of higher-order fragments (node name -> graph).
    """

    def __init__(self, module: fx.GraphModule, loop: nn.Module,
                 in_keys: Sequence[NestedKey] | Mapping[str, Sequence[NestedKey]] | None,
                 name: str = "loop") -> None:
        self.module = module
        self.loop = loop
        self.name = name
        self.nodes: list[FragmentNode] = []
        self.edges: list[DataEdge] = []
        self.shared: list[SharedEdge] = []
        self.inputs: dict[str, tuple[Key, ...]] = {}
        self.subgraphs: dict[str, FragmentGraph] = {}
        self._analyze(in_keys)

    # -- analysis ----------------------------------------------------------------------
    def _analyze(self, in_keys: Any) -> None:
        graph = self.module.graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        if isinstance(in_keys, Mapping):
            declared = {str(k): [_k(x) for x in v] for k, v in in_keys.items()}
        elif in_keys is not None and placeholders:
            declared = {placeholders[0].target: [_k(x) for x in in_keys]}
        else:
            declared = {}
        # keys available on each value: key -> name of the producer
        avail: dict[fx.Node, Any] = {}
        for ph in placeholders:
            keys = declared.get(ph.target, [])
            src = f"input:{ph.target}"
            avail[ph] = {k: src for k in keys}
            self.inputs[ph.target] = tuple(keys)
        by_node: dict[fx.Node, FragmentNode] = {}
        self._check_hidden_dependencies()
        for node in graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            loc = location_from_stack_trace(node.meta.get("stack_trace"))
            if node.op == "call_module":
                mod = self.module.get_submodule(node.target)
                if not isinstance(mod, TensorDictModuleBase):  # pragma: no cover - tracer makes these leaves
                    raise CaptureError(f"{node.target} is not a fragment", loc,
                                       "wrap it: torchfrag.fragments.wrap(module)")
                self._fragment_node(node, mod, loc, avail, by_node)
            elif is_glue(node):
                src = avail.get(node.args[0]) if isinstance(node.args[0], fx.Node) else None
                if node.target is operator.getitem:
                    outs = src if isinstance(src, list) else None
                    avail[node] = outs[node.args[1]] if outs is not None else None
                elif src is None or isinstance(src, list):
                    avail[node] = None
                else:
                    keys = [_k(k) for k in _flatten_keys(node.args[1:])]
                    if node.target == "select":
                        avail[node] = {k: v for k, v in src.items() if any(k[:len(s)] == s for s in keys)}
                    else:
                        avail[node] = {k: v for k, v in src.items() if not any(k[:len(s)] == s for s in keys)}
            else:
                what = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
                raise CaptureError(
                    f"only fragment calls may appear in a captured loop, found {node.op} {what!r}",
                    loc,
                    "move this computation into a Fragment (subclass torchfrag.Fragment or "
                    "wrap a TensorDict module with torchfrag.fragments.wrap)",
                )
        self._shared_edges()
        for fnode in self.nodes:
            node_graph = getattr(fnode.module, "body_graph", None)
            if isinstance(node_graph, FragmentGraph):
                self.subgraphs[fnode.name] = node_graph

    def _fragment_node(self, node: fx.Node, mod: TensorDictModuleBase, loc: Any,
                       avail: dict, by_node: dict) -> None:
        from torchfrag.fragments.base import Fragment

        inputs = _call_inputs(node, avail, loc)
        src_avail = inputs[0].keys
        in_keys = tuple(_k(k) for k in mod.in_keys)
        out_keys = tuple(_k(k) for k in mod.out_keys)
        producers = _check_reads(node, mod, inputs, loc)
        impure = bool(getattr(mod, "impure", False))
        # outputs
        if isinstance(mod, Fragment):
            frozen = None if src_avail is None else frozenset(src_avail)
            out_sets = mod.output_keys(frozen)
        else:
            out_sets = [None if src_avail is None else frozenset(src_avail) | frozenset(out_keys)]
        outs = []
        for s in out_sets:
            if s is None:
                outs.append(None)
                continue
            d = {}
            for k in s:
                k = _k(k)
                d[k] = node.name if (k in out_keys or src_avail is None or k not in src_avail) else src_avail[k]
            outs.append(d)
        avail[node] = outs[0] if len(outs) == 1 else outs
        origins = [o for o in dict.fromkeys(self._origin(i.value, by_node) for i in inputs) if o]
        kind = mod.describe() if isinstance(mod, Fragment) else type(mod).__name__
        fnode = FragmentNode(node.name, str(node.target), kind, in_keys, out_keys, impure,
                             tuple(origins), loc, mod)
        node.meta["fragment"] = fnode
        node.meta["in_keys"] = in_keys
        node.meta["out_keys"] = out_keys
        node.meta["impure"] = impure
        by_node[node] = fnode
        self.nodes.append(fnode)
        for src, keys in producers.items():
            self.edges.append(DataEdge(src, node.name, tuple(keys)))
        for origin in origins:
            if origin not in producers:
                self.edges.append(DataEdge(origin, node.name, ()))

    def _origin(self, arg: Any, by_node: dict) -> str | None:
        while isinstance(arg, fx.Node):
            if arg.op == "placeholder":
                return f"input:{arg.target}"
            if arg in by_node:
                return by_node[arg].name
            arg = arg.args[0] if arg.args else None
        return None

    def _check_hidden_dependencies(self) -> None:
        """Refuses a fragment call whose result is dropped while its input is used later."""
        nodes = list(self.module.graph.nodes)
        order = {n: i for i, n in enumerate(nodes)}
        for node in nodes:
            if node.op != "call_module" or node.users or not node.args:
                continue
            arg = node.args[0]
            if not isinstance(arg, fx.Node):
                continue
            later = [u for u in arg.users if order[u] > order[node]]
            if later:
                use_loc = location_from_stack_trace(later[0].meta.get("stack_trace"))
                where = f" (used again at line {use_loc[1]})" if use_loc else ""
                raise CaptureError(
                    f"the TensorDict returned by fragment {node.target!r} is discarded, but its "
                    f"input is used again afterwards{where}: fragments return their results, so "
                    "relying on an in-place update hides the dependency",
                    location_from_stack_trace(node.meta.get("stack_trace")),
                    f"rebind the result: `td = self.{node.target}(td)`",
                )
            mod = self.module.get_submodule(node.target)
            if not getattr(mod, "impure", False):
                logger.warning("the result of pure fragment %s is unused; eliminate_dead_code() "
                               "removes it", node.target)

    def _shared_edges(self) -> None:
        from torchfrag.fragments.base import Fragment

        frags = [(n, n.module) for n in self.nodes if isinstance(n.module, Fragment)]
        for a, fa in frags:
            owned = {id(p): p for p in fa.owned_parameters()}
            if not owned:
                continue
            for b, fb in frags:
                if a is b:
                    continue
                shared = [owned[id(p)] for p in fb.read_parameters() if id(p) in owned]
                if shared:
                    self.shared.append(SharedEdge(a.name, b.name, "weights", len(shared),
                                                  sum(p.numel() for p in shared)))
        for i, (a, fa) in enumerate(frags):
            sa = {id(o) for o in fa.state_objects()}
            for b, fb in frags[i + 1:]:
                common = [o for o in fb.state_objects() if id(o) in sa]
                if common:
                    self.shared.append(SharedEdge(a.name, b.name, "state", len(common), 0))

    # -- access ------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def node(self, name: str) -> FragmentNode:
        """The node called ``name`` (fx node name or module target)."""
        for n in self.nodes:
            if name in (n.name, n.target):
                return n
        raise KeyError(f"no fragment node {name!r}; nodes: {[n.name for n in self.nodes]}")

    def fragment(self, name: str) -> nn.Module:
        """The fragment module of node ``name``."""
        return self.node(name).module

    @property
    def impure_nodes(self) -> list[str]:
        """Names of the nodes with side effects."""
        return [n.name for n in self.nodes if n.impure]

    def eliminate_dead_code(self) -> list[str]:
        """Removes pure fragment calls whose results are unused; impure ones always stay.

        Returns:
            Names of the removed nodes.
        """
        before = {n.name for n in self.module.graph.nodes if n.op == "call_module"}
        self.module.graph.eliminate_dead_code()
        self.module.recompile()
        after = {n.name for n in self.module.graph.nodes if n.op == "call_module"}
        removed = sorted(before - after)
        self.nodes = [n for n in self.nodes if n.name not in removed]
        self.edges = [e for e in self.edges if e.src not in removed and e.dst not in removed]
        self.shared = [e for e in self.shared if e.src not in removed and e.dst not in removed]
        return removed

    def split(self, assign: Mapping[str, int] | Callable[[FragmentNode], int]) -> fx.GraphModule:
        """Splits the graph into per-partition submodules with ``torch.fx.passes.split_module``.

        Args:
            assign: Node name (or target) -> partition index, or a function of the node.
                Glue nodes follow the fragment whose output they take.

        Returns:
            A GraphModule whose ``submod_<i>`` children are the partitions.
        """
        from torch.fx.passes.split_module import split_module

        by_fx = {n.name: n for n in self.nodes}
        last = [0]

        def part(node: fx.Node) -> int:
            fnode = by_fx.get(node.name)
            if fnode is None:
                src = node.args[0] if node.args else None
                if isinstance(src, fx.Node) and src.name in by_fx:
                    return part(src)
                return last[0]
            if callable(assign):
                p = assign(fnode)
            else:
                p = assign.get(fnode.name, assign.get(fnode.target))
                if p is None:
                    raise KeyError(f"no partition for fragment {fnode.name!r}")
            last[0] = int(p)
            return int(p)

        return split_module(self.module, self.loop, part)

    # -- display -----------------------------------------------------------------------
    def table(self) -> str:
        """A readable table of the nodes, edges and shared state."""
        from torchfrag.graph.render import table

        return table(self)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"FragmentGraph({self.name!r}, nodes={[n.name for n in self.nodes]})"

    def to_dot(self) -> str:
        """The graph in Graphviz DOT syntax (subgraphs of higher-order fragments as clusters)."""
        from torchfrag.graph.render import to_dot

        return to_dot(self)

    def render(self, path: str, *, engine: str = "matplotlib") -> str:
        """Draws the graph to an image file (PNG/SVG/PDF by extension).

        Args:
            path: Output file.
            engine: ``"matplotlib"`` (pure Python, always available) or ``"dot"``
                (Graphviz; falls back to matplotlib when the ``dot`` binary is missing).

        Returns:
            ``path``.
        """
        from torchfrag.graph.render import render

        return render(self, path, engine=engine)
