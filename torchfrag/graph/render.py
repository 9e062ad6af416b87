"""Showing a :class:`~torchfrag.graph.FragmentGraph`: text table, DOT, and images."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchfrag.graph.fragment_graph import FragmentGraph

logger = logging.getLogger(__name__)

__all__ = ["table", "to_dot", "render"]


def _keys(keys: Sequence[tuple[str, ...]], width: int = 44) -> str:
    text = ", ".join(".".join(k) for k in keys) or "-"
    return text if len(text) <= width else text[: width - 1] + "…"


def _grid(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return out


def table(graph: FragmentGraph, indent: str = "") -> str:
    """Nodes (kind, impurity, reads, writes, inputs), shared-state edges and subgraphs."""
    lines = [f"{indent}FragmentGraph {graph.name!r}: {len(graph.nodes)} fragments, "
             f"{len(graph.edges)} data edges, {len(graph.shared)} shared-state edges"]
    for name, keys in graph.inputs.items():
        lines.append(f"{indent}input {name}: {_keys(keys, 80)}")
    rows = []
    for i, n in enumerate(graph.nodes):
        rows.append([str(i), n.name, n.kind, "yes" if n.impure else "no", _keys(n.in_keys),
                     _keys(n.out_keys), ", ".join(n.inputs) or "-",
                     str(n.location[1]) if n.location else "?"])
    lines += [indent + s for s in _grid(
        ["#", "node", "fragment", "impure", "reads", "writes", "from", "line"], rows)]
    if graph.edges:
        lines.append(f"{indent}data edges:")
        for e in graph.edges:
            lines.append(f"{indent}  {e.src} -> {e.dst}: {', '.join(e.keys) or '(order only)'}")
    if graph.shared:
        lines.append(f"{indent}shared state:")
        for e in graph.shared:
            if e.kind == "weights":
                lines.append(f"{indent}  {e.src} => {e.dst}: weights ({e.tensors} tensors, "
                             f"{e.numel} values; weight-sync edge when placed apart)")
            else:
                lines.append(f"{indent}  {e.src} <-> {e.dst}: same env/buffer object")
    for name, sub in graph.subgraphs.items():
        lines.append(f"{indent}subgraph of {name} (captured body, run per step):")
        lines.append(table(sub, indent + "    "))
    return "\n".join(lines)


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _dot_body(graph: FragmentGraph, prefix: str, out: list[str], indent: str) -> None:
    for name in graph.inputs:
        out.append(f'{indent}"{prefix}input:{name}" [label="{_esc(name)}", shape=ellipse];')
    for n in graph.nodes:
        style = 'style="filled", fillcolor="#f4cccc"' if n.impure else 'style="filled", fillcolor="#d9ead3"'
        label = f"{n.name}\\n{_esc(n.kind)}"
        out.append(f'{indent}"{prefix}{n.name}" [label="{label}", shape=box, {style}];')
    for e in graph.edges:
        label = _esc(_keys([tuple(k.split(".")) for k in e.keys], 40)) if e.keys else "order"
        out.append(f'{indent}"{prefix}{e.src}" -> "{prefix}{e.dst}" [label="{label}"];')
    for e in graph.shared:
        if e.kind == "weights":
            out.append(f'{indent}"{prefix}{e.src}" -> "{prefix}{e.dst}" [style=dashed, color=blue, '
                       f'label="weights ({e.numel})", constraint=false];')
        else:
            out.append(f'{indent}"{prefix}{e.src}" -> "{prefix}{e.dst}" [style=dotted, dir=none, '
                       f'color=gray, label="state", constraint=false];')
    for name, sub in graph.subgraphs.items():
        out.append(f'{indent}subgraph "cluster_{prefix}{name}" {{')
        out.append(f'{indent}  label="{_esc(name)} body (per step)"; style=rounded;')
        _dot_body(sub, f"{prefix}{name}/", out, indent + "  ")
        out.append(f"{indent}}}")
        if sub.nodes:
            out.append(f'{indent}"{prefix}{name}" -> "{prefix}{name}/{sub.nodes[0].name}" '
                       f'[style=dotted, arrowhead=odot, label="body"];')


def to_dot(graph: FragmentGraph) -> str:
    """The graph as Graphviz DOT text: impure nodes red, pure green, weight edges dashed blue."""
    out = [f'digraph "{_esc(graph.name)}" {{', "  rankdir=TB;", '  node [fontname="Helvetica"];']
    _dot_body(graph, "", out, "  ")
    out.append("}")
    return "\n".join(out) + "\n"


def render(graph: FragmentGraph, path: str, engine: str = "matplotlib") -> str:
    """Draws ``graph`` to ``path``; see :meth:`FragmentGraph.render`."""
    ext = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    if engine == "dot":
        dot = shutil.which("dot")
        if dot is not None:
            subprocess.run([dot, f"-T{ext}", "-o", path], input=to_dot(graph).encode(), check=True)
            return path
        logger.info("graphviz 'dot' not found; drawing with matplotlib")
    elif engine != "matplotlib":
        raise ValueError(f"engine must be 'matplotlib' or 'dot', got {engine!r}")
    _render_matplotlib(graph, path)
    return path


def _render_matplotlib(graph: FragmentGraph, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    columns: list[tuple[str, FragmentGraph]] = [("", graph)]
    columns += [(f"{name} body (per step)", sub) for name, sub in graph.subgraphs.items()]
    rows = max(len(g.nodes) + len(g.inputs) for _, g in columns) or 1
    fig, ax = plt.subplots(figsize=(5.5 * len(columns), 1.3 * rows + 1.2))
    ax.set_xlim(0, 5.5 * len(columns))
    ax.set_ylim(-rows * 1.3 - 0.3, 0.9)
    ax.axis("off")
    for c, (title, g) in enumerate(columns):
        x0 = 5.5 * c + 0.6
        pos: dict[str, tuple[float, float]] = {}
        items = [(f"input:{n}", n, None) for n in g.inputs] + [(n.name, f"{n.name}\n{n.kind}", n) for n in g.nodes]
        for i, (key, label, node) in enumerate(items):
            y = -i * 1.3
            pos[key] = (x0 + 2.0, y)
            color = "#eeeeee" if node is None else ("#f4cccc" if node.impure else "#d9ead3")
            ax.add_patch(FancyBboxPatch((x0, y - 0.35), 4.0, 0.7, boxstyle="round,pad=0.05",
                                        fc=color, ec="black"))
            ax.text(x0 + 2.0, y, label, ha="center", va="center", fontsize=8)
        for e in g.edges:
            if e.src not in pos or e.dst not in pos:
                continue
            (x1, y1), (x2, y2) = pos[e.src], pos[e.dst]
            bend = 0.0 if abs(y1 - y2) <= 1.31 else 0.4
            ax.annotate("", xy=(x2, y2 + 0.4), xytext=(x1, y1 - 0.4),
                        arrowprops=dict(arrowstyle="->", connectionstyle=f"arc3,rad={bend}"))
            if e.keys:
                ax.text((x1 + x2) / 2 + 0.1 + bend * 2, (y1 + y2) / 2,
                        _keys([tuple(k.split(".")) for k in e.keys], 36), fontsize=6, color="#444")
        for e in g.shared:
            if e.kind != "weights" or e.src not in pos or e.dst not in pos:
                continue
            (x1, y1), (x2, y2) = pos[e.src], pos[e.dst]
            ax.annotate("", xy=(x2 - 2.0, y2), xytext=(x1 - 2.0, y1),
                        arrowprops=dict(arrowstyle="->", ls="--", color="blue",
                                        connectionstyle="arc3,rad=-0.4"))
            ax.text(min(x1, x2) - 2.5, (y1 + y2) / 2, "weights", fontsize=6, color="blue",
                    rotation=90, va="center")
        ax.text(x0 + 2.0, 0.65, title or graph.name, ha="center", fontsize=10, weight="bold")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
