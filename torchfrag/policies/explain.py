"""``explain(graph, policy)``: which fragment runs where, what crosses between processes.

Example:
    >>> from torchfrag.graph import capture
    >>> from torchfrag.policies import explain
    >>> from torchfrag.policies.factory import PPOFactory
    >>> loop = PPOFactory("CartPole-v1", {"num_envs": 4, "steps": 8, "minibatch_size": 16})()
    >>> text = explain(capture(loop), "actors", show=False)
    >>> "rollout" in text and "state" in text
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


def _tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _step_bytes(rollout: nn.Module) -> tuple[int, int, int]:
    """Bytes per env per step of: a transition, the carry into a step, the carry out.

    The act runs once on the env's fake data to learn its outputs' sizes, inside
    :func:`torch.random.fork_rng` and without gradients, so no random stream moves.
    """
    from tensordict import TensorDict

    env = rollout.env
    n = int(env.batch_size.numel())
    fake = env.fake_tensordict()
    carry_in = fake.exclude("next")
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            carry_in = rollout.body.act(carry_in.clone())
    except Exception:  # noqa: BLE001 - the estimate then ignores the act's extra outputs
        pass
    tr = carry_in.clone(False)
    tr.set("next", fake.get("next"))

    def size(td: TensorDict) -> int:
        return sum(v.numel() * v.element_size() for v in td.values(True, True))

    carry_out = fake.get("next").exclude("reward")
    return size(tr) // n, size(carry_in) // n, (size(carry_out) + size(carry_in.select(*env.action_keys))) // n


def _frames(graph: FragmentGraph, node: str, envs: int | None = None) -> tuple[int, int]:
    """``(envs, steps)`` of a rollout node."""
    frag = graph.fragment(node)
    env = getattr(frag, "env", None)
    total = int(env.batch_size.numel()) if env is not None else 0
    return (total if envs is None else envs), int(getattr(frag, "steps", 1))


def crossings(placement: Placement) -> list[Crossing]:
    """The edges of a placed graph that cross processes, with per-iteration sizes.

    Chosen by :attr:`~torchfrag.policies.Placement.kind` (never by the policy's name), so a
    user policy is explained like the shipped ones. A batch leaving the workers is
    counted once, whatever number of fragments consume it.
    """
    policy, graph = placement.policy, placement.graph
    out: list[Crossing] = []
    kind = placement.kind
    if kind in ("replicated_rollout", "async_replicated_rollout", "replicated_learners"):
        chain = [n for n, r in placement.roles.items() if r != "learner"]
        role = placement.roles[chain[0]]
        node = chain[0]
        frag = graph.fragment(node)
        n_act = placement.workers(role)
        learners = placement.workers("learner")  # every learner (the driver's and the others) has actors
        per_actor = getattr(policy, "envs_per_actor", None)
        envs, steps = _frames(graph, node, None if per_actor is None else int(per_actor) * n_act)
        if per_actor is None:
            envs *= learners
        frames = envs * steps
        batch = _step_bytes(frag)[0] * frames if getattr(frag, "env", None) is not None else 0
        added = 0
        rewrites_reward = False
        for later in chain[1:]:
            f = graph.fragment(later)
            for k in f.out_keys:
                if k == ("next", "reward"):
                    rewrites_reward = True
                else:
                    added += 1
        batch += 4 * added * frames + (4 * frames if rewrites_reward else 0)  # + the raw reward
        consumers = sorted({e.dst for e in graph.edges if e.src in chain and e.dst not in chain})
        where = f"{role}[{n_act}]"
        out.append(Crossing(f"{chain[-1]}@{where}", ", ".join(f"{c}@learner" for c in consumers) or "learner",
                            "data", "batch" + (f" (after {', '.join(chain[1:])})" if len(chain) > 1 else ""),
                            n_act, batch))
        every = int(getattr(policy, "sync_every", 1))
        state = sum(_tensor_bytes(graph.fragment(c).shared_state().values()) for c in chain)
        n_tensors = sum(len(graph.fragment(c).shared_state()) for c in chain)
        owners = sorted({s.src for s in graph.shared if s.kind == "weights" and s.dst in chain
                         and s.src not in chain}) or ["learner"]
        out.append(Crossing(f"{', '.join(owners)}@learner", f"{', '.join(chain)}@{where}", "state",
                            f"{n_tensors} tensors: parameters, buffers, produced state (every {every} it.)",
                            0, state * n_act // every))
        produced = sum(_tensor_bytes(graph.fragment(c).produced_state().values()) for c in chain)
        if produced:
            out.append(Crossing(f"{node}@{where}", f"{node}@learner", "merge",
                                "produced state merged back (running statistics)", 0, produced * n_act))
        if kind == "replicated_learners":
            out.extend(_gradient_crossings(graph, f"learner[{learners}]", learners))
    elif kind == "env_calls":
        node = next(iter(placement.env_split))
        role = placement.env_split[node]
        frag = graph.fragment(node)
        n_env = placement.workers(role)
        total, steps = _frames(graph, node)
        tr, cin, _cout = _step_bytes(frag)
        out.append(Crossing(f"{node}.act@learner", f"{node}.env_step@{role}[{n_env}]", "data",
                            "carry + action (per step)", n_env * steps, cin * total * steps))
        out.append(Crossing(f"{node}.env_step@{role}[{n_env}]", f"{node}.act@learner", "data",
                            "transition + next carry (per step)", 0, (tr + cin) * total * steps))
    elif kind == "replicated_loop":
        world = placement.workers(next(iter(placement.roles.values())))
        out.extend(_gradient_crossings(graph, f"replica[{world}]", world))
    return out


def _gradient_crossings(graph: FragmentGraph, where: str, world: int) -> list[Crossing]:
    """The gradient all-reduce of every fragment that declares gradient sync, over ``world`` ranks.

    Bytes are a ring all-reduce's traffic per rank: ``2 * (world - 1) / world`` times the
    gradient bytes, per optimizer step.
    """
    out = []
    for n in graph.nodes:
        frag = n.module
        if not frag.has_gradient_sync():
            continue
        opt = getattr(frag, "optimizer", None)
        params = [p for g in opt.param_groups for p in g["params"]] if opt is not None else \
            frag.owned_parameters()
        nbytes = _tensor_bytes(params)
        per_iter = _optimizer_steps(graph, frag)
        out.append(Crossing(f"{n.name}@{where}", f"{n.name}@{where}",
                            "gradients", f"all-reduce of {len(params)} tensors ({per_iter} per it.)",
                            per_iter, 2 * nbytes * per_iter * (world - 1) // max(1, world)))
    return out


def _optimizer_steps(graph: FragmentGraph, frag: nn.Module) -> int:
    """Optimizer steps per iteration: declared by ``optimizer_steps(frames)``, else from Learn's settings."""
    from torchfrag.policies.base import rollout_nodes

    found = rollout_nodes(graph)
    frames = 0
    if found:
        envs, steps = _frames(graph, found[0])
        frames = envs * steps
    hook = getattr(frag, "optimizer_steps", None)
    if callable(hook):
        return int(hook(frames))
    if hasattr(frag, "_minibatch") and frames:
        mb = frag._minibatch(frames)
        return int(getattr(frag, "epochs", 1)) * (frames // mb)
    return 1


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
        if role == "learner" and procs > 1:
            where = f"driver + {procs - 1} worker(s)"
        if role == "replica":
            where = f"every rank ({procs})"
        rows.append((n.name, n.kind, role, where, policy.device(role)))
        if n.name in placement.env_split and n.name in graph.subgraphs:
            split = placement.env_split[n.name]
            for sub in graph.subgraphs[n.name].nodes:
                r = split if getattr(sub.module, "role", None) == "env" else "learner"
                rows.append((f"  {n.name}.{sub.name}", sub.kind, r,
                             f"{placement.workers(r)} worker(s)" if r != "learner" else "driver",
                             policy.device(r)))
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
    if placement.env_split:
        roles = ["learner", *dict.fromkeys(placement.env_split.values())]
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
        if n.name in placement.env_split and n.name in graph.subgraphs:
            items.append((f"{n.name}.act", "learner"))
            items.append((f"{n.name}.env_step", placement.env_split[n.name]))
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
