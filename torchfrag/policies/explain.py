"""``explain(graph, policy)``: which fragment runs where, what crosses between processes.

The bytes are exact: they equal what the runtime counts (RPC tensors both ways, each rank's
all-reduced gradients), per iteration plus what is sent once at the first; the pickled size of
every payload is reported beside them. Explaining is pure: the sizes come from the env specs,
the state's tensors and deep copies of the fragments run on fake data, so no fragment, buffer
or random stream of the user's loop changes.

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

import contextlib
import copy
import logging
import pickle
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torch import nn

from torchfrag.graph import FragmentGraph
from torchfrag.policies.base import Placement, Policy, as_policy

logger = logging.getLogger(__name__)

_REWARD = ("next", "reward")

#: Bytes one rank puts on its link per gloo all-reduce and per peer (``world - 1``), beyond the
#: ring's tensor traffic: gloo's ring messages (each with its own framing) and the Ethernet, IP and
#: TCP headers and acknowledgements around them (~15 packets per peer, whatever the tensor's size).
#: Measured once on the simulated cluster's veth links (``python -m benchmarks.cluster
#: --bandwidth``'s probe: 1435-1669 B at 2, 4 and 8 ranks for 256 B and 36 KiB tensors, torch 2.x's
#: gloo); without it ``data_parallel``'s prediction fell 8-21% short of what the links carried.
ALLREDUCE_PEER_OVERHEAD = 1600

__all__ = ["explain", "Crossing", "crossings"]


@dataclass
class Crossing:
    """One edge between processes.

    Attributes:
        src: Producer (``"<node>@<role>"``).
        dst: Consumer.
        kind: ``data``, ``state``, ``merge`` or ``gradients``.
        what: What travels (keys, parameter count).
        calls: RPC calls (or collectives) per iteration.
        bytes: Tensor bytes per iteration: what the runtime's counters count
            (:class:`~torchfrag.runtime.comm.CommStats` for RPC, the all-reduced gradient
            bytes of each rank for collectives).
        pickled: Bytes of the pickled payloads per iteration (tensor data plus the keys,
            shapes and containers around it); for a collective, what each rank puts on its
            link: the ring all-reduce's tensor traffic (``2 * (world - 1) / world`` times
            ``bytes``) plus gloo's per-peer message overhead (:data:`ALLREDUCE_PEER_OVERHEAD`).
        once: Tensor bytes sent once, at the first iteration only (the first reset of
            remote envs, the requests an asynchronous policy keeps in flight).
    """

    src: str
    dst: str
    kind: str
    what: str
    calls: int
    bytes: int
    pickled: int = 0
    once: int = 0


def _tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@contextlib.contextmanager
def _untouched_random_streams() -> Iterator[None]:
    """Every random stream is restored on exit: torch's (CPU and initialised CUDA devices),
    Python's and NumPy's; gradients are off inside."""
    py_state = random.getstate()
    np_state = np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def _on_copies(modules: list[nn.Module], td: TensorDictBase) -> TensorDictBase | None:
    """``td`` through deep copies of ``modules`` in turn (``None`` when one cannot run on fake data).

    The user's modules are never called: a buffer a ``forward`` updates (a running
    normaliser, a counter) changes only in the copy, and every random stream is restored.
    """
    try:
        with _untouched_random_streams():
            for module in copy.deepcopy(modules):
                td = module(td)
        return td
    except Exception as err:  # noqa: BLE001 - explained without these outputs, and said so
        logger.warning("explain: copies of %s did not run on the env's fake data (%s); the keys they "
                       "add are not counted", [type(m).__name__ for m in modules], err)
        return None


def _fake_batch(graph: FragmentGraph, chain: list[str], steps: int) -> tuple[TensorDictBase, Any]:
    """A batch of one env and ``steps`` steps shaped as the rollout ``chain[0]`` returns it after
    ``chain``, built from the env's specs and copies of the fragments; and its raw reward.

    Every entry of a TensorDict has its batch dims, so the bytes of ``E`` envs are ``E`` times
    these. The raw reward is the rollout's ``("next", "reward")`` when a later fragment of the
    chain replaced it (the actors then send both), else ``None``.
    """
    rollout = graph.fragment(chain[0])
    fake = rollout.env.fake_tensordict()
    carry = fake.exclude("next")
    acted = _on_copies([rollout.body.act], carry.clone())
    step = (carry if acted is None else acted).clone(False)
    step.set("next", fake.get("next"))
    batch = step.reshape(-1)[:1].unsqueeze(-1).expand(1, steps).clone()
    before = batch.get(_REWARD, None)
    after = _on_copies([graph.fragment(n) for n in chain[1:]], batch) if len(chain) > 1 else batch
    if after is None:
        return batch, None
    reward = after.get(_REWARD, None)
    changed = before is not None and (reward is None or reward.data_ptr() != before.data_ptr())
    return after, (before if changed else None)


def _overhead(payload: Any) -> int:
    """Bytes pickling ``payload`` adds to its tensor data (keys, shapes, dtypes, containers)."""
    from torchfrag.runtime.comm import nbytes

    return len(pickle.dumps(payload)) - nbytes(payload)


def _frames(graph: FragmentGraph, node: str, envs: int | None = None) -> tuple[int, int]:
    """``(envs, steps)`` of a rollout node."""
    frag = graph.fragment(node)
    env = getattr(frag, "env", None)
    total = int(env.batch_size.numel()) if env is not None else 0
    return (total if envs is None else envs), int(getattr(frag, "steps", 1))


def crossings(placement: Placement) -> list[Crossing]:
    """The edges of a placed graph that cross processes, with per-iteration sizes.

    Those of the executor that :attr:`~torchfrag.policies.Placement.kind` names (never chosen by
    the policy's name: :meth:`~torchfrag.runtime.executor.Executor.crossings`), so a
    user policy is explained like the shipped ones. A batch leaving the workers is
    counted once, whatever number of fragments consume it. Computed from the specs, the
    state's tensors and deep copies of the fragments: explaining changes no fragment,
    buffer or random stream.
    """
    from torchfrag.runtime.executor import executor_class

    return executor_class(placement.kind).crossings(placement)


def replica_outputs(graph: FragmentGraph, world: int) -> Crossing:
    """Every other replica's output (the loop's metrics) returned to the driver each iteration.

    The output's sizes are not in any spec: it is counted as one float32 scalar per key of the
    fragment that returns it (a learner's metrics).
    """
    out = next(n for n in graph.module.graph.nodes if n.op == "output")
    src = out.args[0]
    keys = graph.fragment(src.name).out_keys if getattr(src, "op", None) == "call_module" else []
    fake = {str(k): torch.zeros((), dtype=torch.float32) for k in keys}
    others = world - 1
    return Crossing(f"{getattr(src, 'name', 'output')}@replica[{others}]", "driver", "data",
                    f"the loop's output ({len(keys)} scalar(s) assumed)", others, 4 * len(keys) * others,
                    4 * len(keys) * others + others * _overhead(fake))


def _actor_envs(placement: Placement, node: str) -> tuple[int, int]:
    """``(actors, envs over them)`` of the rollout ``node``: every learner has its own actors."""
    graph = placement.graph
    n_act = placement.workers(placement.roles[node])
    per_actor = placement.option("envs_per_actor")
    envs, _ = _frames(graph, node, None if per_actor is None else int(per_actor) * n_act)
    if per_actor is None:
        envs *= placement.workers("learner")
    return n_act, envs


def replicated_rollout_crossings(placement: Placement, in_flight: int | None = None) -> list[Crossing]:
    """The actors' batches in, their fragments' state out, the state they produced merged back.

    ``in_flight``: requests each actor is sent ahead at the start (asynchronous actors: option
    ``prefetch``); ``None`` reads it from the placement (0 unless its kind is asynchronous).
    """
    graph = placement.graph
    chain = [n for n, r in placement.roles.items() if r != "learner"]
    node, role = chain[0], placement.roles[chain[0]]
    n_act, envs = _actor_envs(placement, node)
    _, steps = _frames(graph, node)
    frames = envs * steps
    where = f"{role}[{n_act}]"
    frags = [graph.fragment(c) for c in chain]
    produced = [list(f.produced_state().values()) for f in frags]
    batch, raw = (_fake_batch(graph, chain, steps) if getattr(frags[0], "env", None) is not None
                  else (None, None))
    from torchfrag.runtime.comm import nbytes

    # The fake batch holds one env for every step: the actors' hold frames / steps envs.
    data = int(round((nbytes(batch) + nbytes(raw)) * frames / steps)) if batch is not None else 0
    pickled = data + n_act * _overhead((batch, 0, raw, [])) if batch is not None else 0
    made = nbytes(produced) * n_act
    consumers = sorted({e.dst for e in graph.edges if e.src in chain and e.dst not in chain})
    what = "batch" + (f" (after {', '.join(chain[1:])})" if len(chain) > 1 else "")
    what += " + raw reward" if raw is not None else ""
    out = [Crossing(f"{chain[-1]}@{where}", ", ".join(f"{c}@learner" for c in consumers) or "learner",
                    "data", what, n_act, data, pickled)]
    if made:
        holders = [c for c, p in zip(chain, produced) if p]
        out.append(Crossing(f"{', '.join(holders)}@{where}", f"{', '.join(holders)}@learner", "merge",
                            "produced state merged back (running statistics)", 0, made,
                            made + n_act * _overhead(produced)))
    out.append(_state_crossing(placement, chain, where, n_act, in_flight))
    return out


def replay_crossings(placement: Placement) -> list[Crossing]:
    """Ape-X (``replay``): actors' batches to the replay worker, their rewards and done flags to the
    learner, the learner's samples from the replay worker, the actors' state out."""
    from torchfrag.fragments import ReplaySample, ReplayWrite
    from torchfrag.runtime.comm import nbytes

    graph = placement.graph
    held = placement.nodes_of("replay")
    write = next(n for n in held if isinstance(graph.fragment(n), ReplayWrite))
    sample = next(n for n in held if isinstance(graph.fragment(n), ReplaySample))
    chain = placement.nodes_of("actor")  # the rollout, then the per-env fragments the actors run after it
    node = chain[0]
    n_act = placement.workers("actor")
    per_actor = placement.option("envs_per_actor")
    envs, steps = _frames(graph, node, None if per_actor is None else int(per_actor) * n_act)
    batch, _ = _fake_batch(graph, chain, steps)
    keys = list(graph.fragment(write).in_keys)
    written = batch.select(*keys) if keys else batch
    summary = batch.select(*[k for k in (_REWARD, ("next", "done")) if k in batch.keys(True)])
    frames = envs * steps
    to_replay = nbytes(written) * frames // steps
    to_learner = nbytes(summary) * frames // steps
    size = int(getattr(graph.fragment(sample), "batch_size", None) or 0)
    sampled = nbytes(written[:, 0]) * size  # one transition's bytes, times the sample size
    where = f"actor[{n_act}]"
    return [
        Crossing(f"{node}@{where}", f"{write}@replay[1]", "data", "batch (actors write it themselves)",
                 n_act, to_replay, to_replay + n_act * _overhead(written)),
        Crossing(f"{node}@{where}", "learner", "data", "rewards + done flags (frame and episode counts)",
                 n_act, to_learner, to_learner + n_act * _overhead((summary, 0, None, [], 0))),
        Crossing(f"{sample}@replay[1]", "learner", "data", f"sample of {size} transitions", 1, sampled,
                 sampled + _overhead(written[:, 0])),
        _state_crossing(placement, chain, where, n_act),
    ]


def _state_crossing(placement: Placement, chain: list[str], where: str, n_act: int,
                    in_flight: int | None = None) -> Crossing:
    """The state of the actors' fragments, packed and sent with the request every ``sync_every`` it.

    ``in_flight``: requests (each with the state) sent ahead to every actor at the start; ``None``:
    option ``prefetch`` when the placement's kind is asynchronous, else none.
    """
    from torchfrag.runtime.state_sync import pack_state

    graph = placement.graph
    every = int(placement.option("sync_every", 1))
    groups = [graph.fragment(c).shared_state() for c in chain]
    packed = pack_state(groups) if any(groups) else {}
    state = _tensor_bytes(packed.values())
    n_tensors = sum(len(g) for g in groups)
    owners = sorted({s.src for s in graph.shared if s.kind == "weights" and s.dst in chain
                     and s.src not in chain})
    src = f"{', '.join(owners)}@learner" if owners else "learner"
    if in_flight is None:  # the requests kept in flight from the start
        in_flight = int(placement.option("prefetch", 1)) if placement.kind == "async_replicated_rollout" else 0
    once = state * n_act * in_flight
    return Crossing(src, f"{', '.join(chain)}@{where}", "state",
                    f"{n_tensors} tensors: parameters, buffers, produced state (every {every} it.)",
                    0, state * n_act // every, (state + _overhead((packed, 0))) * n_act // every, once)


def env_call_crossings(placement: Placement) -> list[Crossing]:
    """Per step: the carry with actions out to the env workers, transitions and next carries back."""
    from torchfrag.runtime.comm import nbytes

    graph = placement.graph
    node = next(iter(placement.env_split))
    role = placement.env_split[node]
    frag = graph.fragment(node)
    n_env = placement.workers(role)
    total, steps = _frames(graph, node)
    fake = frag.env.fake_tensordict()
    carry = fake.exclude("next")
    acted = _on_copies([frag.body.act], carry.clone())
    acted = carry if acted is None else acted
    transition = acted.clone(False).set("next", fake.get("next"))
    produced = list(frag.produced_state().values())
    state = nbytes(produced) * n_env  # every worker gets the driver's state and sends its delta back
    sent = nbytes(acted) + state
    back = nbytes(transition) + nbytes(acted) + state
    reset = nbytes(carry.exclude(*frag.env.action_keys)) + state  # the first carry
    sent_pickled = sent + n_env * _overhead((acted, produced or None))
    back_pickled = back + n_env * _overhead(((transition, acted), produced or None))
    return [
        Crossing(f"{node}.act@learner", f"{node}.env_step@{role}[{n_env}]", "data",
                 "carry + action (per step)", n_env * steps, sent * steps, sent_pickled * steps, state),
        Crossing(f"{node}.env_step@{role}[{n_env}]", f"{node}.act@learner", "data",
                 "transition + next carry (per step)", 0, back * steps, back_pickled * steps, reset),
    ]


def gradient_crossings(graph: FragmentGraph, where: str, world: int) -> list[Crossing]:
    """The gradient all-reduce of every fragment that declares gradient sync, over ``world`` ranks.

    ``bytes`` are the gradient bytes each rank all-reduces per iteration (what
    :class:`~torchfrag.fragments.base.GradientSyncOptimizer` counts): the optimizer's
    parameters, times its steps per iteration; ``pickled`` what each rank puts on its link: the ring
    all-reduce's traffic, ``2 * (world - 1) / world`` times that, plus
    :data:`ALLREDUCE_PEER_OVERHEAD` per peer and all-reduce.

    Example:
        >>> from torchfrag.graph import capture
        >>> from torchfrag.policies.factory import PPOFactory
        >>> loop = PPOFactory("CartPole-v1", {"num_envs": 4, "steps": 8, "minibatch_size": 32})()
        >>> [g] = gradient_crossings(capture(loop), "replica[4]", 4)
        >>> g.pickled == 2 * g.bytes * 3 // 4 + g.calls * 3 * ALLREDUCE_PEER_OVERHEAD
        True
        >>> loop.close()
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
        per_iter, declared = _optimizer_steps(graph, frag)
        steps = f"{per_iter} per it." + ("" if declared else ", assumed: declare optimizer_steps(frames)")
        reduced = nbytes * per_iter
        out.append(Crossing(f"{n.name}@{where}", f"{n.name}@{where}",
                            "gradients", f"all-reduce of {len(params)} tensors ({steps})",
                            per_iter, reduced, 2 * reduced * (world - 1) // max(1, world)
                            + per_iter * (world - 1) * ALLREDUCE_PEER_OVERHEAD))
    return out


def _optimizer_steps(graph: FragmentGraph, frag: nn.Module) -> tuple[int, bool]:
    """Optimizer steps per iteration, and whether the fragment declared them.

    Declared by :meth:`~torchfrag.fragments.Fragment.optimizer_steps` for the frames of one
    learner's rollout; a fragment that declares nothing is assumed to step once.
    """
    from torchfrag.policies.base import rollout_nodes

    found = rollout_nodes(graph)
    frames = 0
    if found:
        envs, steps = _frames(graph, found[0])
        frames = envs * steps
    hook = getattr(frag, "optimizer_steps", None)
    steps_declared = hook(frames) if callable(hook) else None
    if steps_declared is None:
        return 1, False
    return int(steps_declared), True


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
        rows2 = [("from", "to", "kind", "carries", "calls", "bytes", "pickled")]
        for c in cross:
            rows2.append((c.src, c.dst, c.kind, c.what, str(c.calls) if c.calls else "-", _fmt_bytes(c.bytes),
                          _fmt_bytes(c.pickled)))
        widths = [max(len(str(r[i])) for r in rows2) for i in range(7)]
        for r in rows2:
            lines.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
        total, pickled = sum(c.bytes for c in cross), sum(c.pickled for c in cross)
        lines.append(f"  total: {_fmt_bytes(total)} of tensors per iteration, {_fmt_bytes(pickled)} pickled "
                     "(collectives: ring traffic per rank)")
        once = sum(c.once for c in cross)
        if once:
            lines.append(f"  and once, at the first iteration: {_fmt_bytes(once)} of tensors")
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
