"""``explain(graph, policy)``: which fragment runs where, what crosses between processes.

Example:
    >>> from torchfrag.graph import capture
    >>> from torchfrag.policies import explain
    >>> from torchfrag.policies.factory import PPOFactory
    >>> loop = PPOFactory("CartPole-v1", {"num_envs": 4, "steps": 8, "minibatch_size": 16})()
    >>> text = explain(capture(loop), "actors", show=False)
    >>> "rollout" in text and "weights" in text
    True
    >>> loop.close()
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from torchfrag.graph import FragmentGraph
from torchfrag.policies.base import Placement, Policy, as_policy

logger = logging.getLogger(__name__)

__all__ = ["explain", "Crossing", "crossings"]


@dataclass
class Crossing:
    """One edge between processes.

    Attributes:
        src: Producer (``"<node>@<role>"``).
        dst: Consumer.
        kind: ``data``, ``weights`` or ``gradients``.
        what: What travels (keys, parameter count).
        calls: RPC calls (or collectives) per iteration.
        bytes: Bytes per iteration (estimated from the specs and parameter sizes).
    """

    src: str
    dst: str
    kind: str
    what: str
    calls: int
    bytes: int


def _step_bytes(rollout: nn.Module) -> tuple[int, int, int]:
    """Bytes per env per step of: a transition, the carry into a step, the carry out."""
    from tensordict import TensorDict

    env = rollout.env
    n = int(env.batch_size.numel())
    fake = env.fake_tensordict()
    carry_in = fake.exclude("next")
    try:
        with torch.no_grad():
            carry_in = rollout.body.act(carry_in.clone())
    except Exception:  # noqa: BLE001 - the estimate then ignores the act's extra outputs
        pass
    tr = carry_in.clone(False)
    tr.set("next", fake.get("next"))

    def size(td: TensorDict) -> int:
        return sum(v.numel() * v.element_size() for v in td.values(True, True))

    carry_out = fake.get("next").exclude("reward")
    return size(tr) // n, size(carry_in) // n, (size(carry_out) + size(carry_in.select(*env.action_keys))) // n


def crossings(placement: Placement) -> list[Crossing]:
    """The edges of a placed graph that cross processes, with per-iteration sizes."""
    from torchfrag.policies.base import env_nodes, rollout_nodes

    policy, graph = placement.policy, placement.graph
    out: list[Crossing] = []
    name = policy.name
    if name in ("actors", "async_actors"):
        chain = placement.nodes_of("actor")  # the rollout, then the per-env fragments run with it
        node = chain[0]
        frag = graph.fragment(node)
        n_act = int(policy.actors)
        steps = int(getattr(frag, "steps", 1))
        env = getattr(frag, "env", None)
        total = int(env.batch_size.numel()) if env is not None else 0
        envs = total if policy.envs_per_actor is None else int(policy.envs_per_actor) * n_act
        per = _step_bytes(frag)[0] if env is not None else 0
        for e in graph.edges:
            if e.src in chain and placement.roles.get(e.dst) != "actor":
                # The rollout's transitions; after it, one float32 per frame and key (advantage, ...).
                nbytes = per * steps * envs if e.src == node else 4 * len(e.keys) * steps * envs
                out.append(Crossing(f"{e.src}@actor[{n_act}]", f"{e.dst}@{placement.roles[e.dst]}", "data",
                                    ", ".join(e.keys) or "batch", n_act if e.src == node else 0, nbytes))
        every = int(policy.sync_every)
        for s in graph.shared:
            if s.kind == "weights" and s.dst in chain:
                params = graph.fragment(s.dst).read_parameters()
                wbytes = sum(p.numel() * p.element_size() for p in params)
                out.append(Crossing(f"{s.src}@learner", f"{s.dst}@actor[{n_act}]", "weights",
                                    f"{s.tensors} tensors, {s.numel} params (every {every} it.)",
                                    0, wbytes * n_act // every))
    elif name == "central_inference":
        node = env_nodes(graph)[0]
        frag = graph.fragment(node)
        n_env = int(policy.env_workers)
        steps = int(frag.steps)
        total = int(frag.env.batch_size.numel())
        tr, cin, _cout = _step_bytes(frag)
        out.append(Crossing(f"{node}.act@learner", f"{node}.env_step@env[{n_env}]", "data",
                            "carry + action (per step)", n_env * steps, cin * total * steps))
        out.append(Crossing(f"{node}.env_step@env[{n_env}]", f"{node}.act@learner", "data",
                            "transition + next carry (per step)", 0, (tr + cin) * total * steps))
    elif name == "data_parallel":
        params: dict[int, nn.Parameter] = {}
        from torchfrag.fragments import Learn

        for n in graph.nodes:
            if isinstance(n.module, Learn):
                for p in n.module.owned_parameters():
                    params[id(p)] = p
                learn = n.module
                nbytes = sum(p.numel() * p.element_size() for p in params.values())
                found = rollout_nodes(graph)
                per_iter = 0
                if found:
                    ro = graph.fragment(found[0])
                    frames = int(ro.env.batch_size.numel()) * int(getattr(ro, "steps", 1))
                    mb = learn._minibatch(frames)
                    per_iter = learn.epochs * (frames // mb)
                out.append(Crossing(f"{n.name}@replica[{policy.workers}]", f"{n.name}@replica[{policy.workers}]",
                                    "gradients", f"all-reduce of {len(params)} tensors ({per_iter} per it.)",
                                    per_iter, 2 * nbytes * per_iter * (policy.workers - 1) // max(1, policy.workers)))
    return out


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def explain(graph: FragmentGraph, policy: Policy | str | dict[str, Any], *, path: str | None = None,
            show: bool = True) -> str:
    """Describes (and optionally draws) ``graph`` placed by ``policy``.

    Args:
        graph: A captured loop.
        policy: A policy, its name, or a mapping (Hydra node).
        path: When given, the placed graph is drawn there (PNG/SVG by extension).
        show: Log the text at INFO level as well as returning it.

    Returns:
        A text report: one row per fragment (role, processes, device), then one
        row per crossing edge (what it carries, calls and bytes per iteration).
    """
    policy = as_policy(policy)
    placement = policy.place(graph)
    lines = [f"policy {policy.name}: {1 + policy.num_workers} process(es) "
             f"(driver + {policy.num_workers} worker(s))", ""]
    rows = [("fragment", "kind", "role", "processes", "device")]
    for n in graph.nodes:
        role = placement.roles[n.name]
        procs = placement.workers(role)
        where = "driver" if role == "learner" else f"{procs} worker(s)"
        if role == "replica":
            where = f"every rank ({procs})"
        rows.append((n.name, n.kind, role, where, policy.device(role)))
        if policy.name == "central_inference" and n.name in graph.subgraphs:
            for sub in graph.subgraphs[n.name].nodes:
                r = "env" if sub.name == "env_step" else "learner"
                rows.append((f"  {n.name}.{sub.name}", sub.kind, r,
                             f"{policy.env_workers} worker(s)" if r == "env" else "driver", policy.device(r)))
    widths = [max(len(str(r[i])) for r in rows) for i in range(5)]
    for r in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    cross = crossings(placement)
    lines.append("")
    if not cross:
        lines.append("no edge crosses processes")
    else:
        lines.append("edges crossing processes (per iteration):")
        rows2 = [("from", "to", "kind", "carries", "calls", "bytes")]
        for c in cross:
            rows2.append((c.src, c.dst, c.kind, c.what, str(c.calls) if c.calls else "-", _fmt_bytes(c.bytes)))
        widths = [max(len(str(r[i])) for r in rows2) for i in range(6)]
        for r in rows2:
            lines.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
        total = sum(c.bytes for c in cross)
        lines.append(f"  total: {_fmt_bytes(total)} per iteration")
    text = "\n".join(lines)
    if show:
        logger.info("%s", text)
    if path is not None:
        _render(placement, cross, path)
    return text


def _render(placement: Placement, cross: list[Crossing], path: str) -> str:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    policy, graph = placement.policy, placement.graph
    roles = list(dict.fromkeys(["learner", *placement.roles.values()]))
    if policy.name == "central_inference":
        roles = ["learner", "env"]
    fig, ax = plt.subplots(figsize=(2.8 * len(roles) + 1.5, 1.2 * len(graph.nodes) + 2.2))
    colors = {"learner": "#cfe2f3", "actor": "#d9ead3", "env": "#fce5cd", "replica": "#ead1dc"}
    pos: dict[str, tuple[float, float]] = {}
    for j, role in enumerate(roles):
        x = 3.0 * j
        procs = placement.workers(role)
        label = f"{role} (driver)" if role == "learner" else f"{role} x{procs}"
        ax.add_patch(FancyBboxPatch((x - 1.3, -len(graph.nodes) - 0.6), 2.6, len(graph.nodes) + 1.4,
                                    boxstyle="round,pad=0.05", fc=colors.get(role, "#eeeeee"), ec="grey"))
        ax.text(x, 0.55, label, ha="center", va="bottom", fontsize=10, weight="bold")
    items: list[tuple[str, str]] = []
    for n in graph.nodes:
        if policy.name == "central_inference" and n.name in graph.subgraphs:
            items.append((f"{n.name}.act", "learner"))
            items.append((f"{n.name}.env_step", "env"))
        items.append((n.name, placement.roles[n.name]))
    for i, (name, role) in enumerate(items):
        x = 3.0 * roles.index(role)
        y = -i * (len(graph.nodes) / max(1, len(items)))
        pos[name] = (x, y)
        ax.text(x, y, name, ha="center", va="center", fontsize=9,
                bbox=dict(boxstyle="round", fc="white", ec="black"))
    for e in graph.edges:
        if e.src in pos and e.dst in pos:
            crossing = placement.roles.get(e.src) != placement.roles.get(e.dst)
            ax.annotate("", pos[e.dst], pos[e.src], arrowprops=dict(
                arrowstyle="->", color="C3" if crossing else "black", ls="--" if crossing else "-"))
    for s in graph.shared:
        if s.kind == "weights" and s.src in pos and s.dst in pos and \
                placement.roles.get(s.src) != placement.roles.get(s.dst):
            ax.annotate("", pos[s.dst], pos[s.src], arrowprops=dict(arrowstyle="->", color="C0", ls=":",
                                                                    connectionstyle="arc3,rad=0.3"))
    txt = "\n".join(f"{c.kind}: {c.src} -> {c.dst}: {_fmt_bytes(c.bytes)}/it" for c in cross)
    ax.text(-1.3, -len(graph.nodes) - 0.9, txt or "no crossing edges", va="top", fontsize=8, family="monospace")
    ax.set_xlim(-1.6, 3.0 * (len(roles) - 1) + 1.6)
    ax.set_ylim(-len(graph.nodes) - 1.0 - 0.35 * max(1, len(cross)), 1.2)
    ax.axis("off")
    ax.set_title(f"{graph.name} under policy {policy.name}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
