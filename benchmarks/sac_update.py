"""One SAC gradient step (``algo=sac_mujoco`` on HalfCheetah-v5): where its time goes, and what changes it.

The gradient step is ``Learn`` on ``FastSACLoss`` with fused Adam, as
``torchfrag.algos.sac`` runs it (256x256 networks, batch 256). Sides, measured
alternating (``benchmarks._common.alternate``), each a block of ``--steps``
steps on the same replay sample, medians over ``--repeats``:

* ``eager``: the step as shipped (float32), one torch thread;
* ``bf16``: the same step with ``algo.matmul_dtype=bfloat16`` (products in bfloat16);
* ``CleanRL-style``: CleanRL's gradient step on the same sample
  (:class:`benchmarks.sac_peers.CleanRLStyleUpdate`: separate optimizers, the
  actor and temperature twice every second step), one torch thread;
* ``batch 8``: the same step on 8 samples: what does not scale with the batch
  is left (Python, dispatch, the autograd engine, and the work on the weights:
  Adam, the gradient norm), a bound on what a faster runtime could remove;
* ``2 threads``: the step with ``torch.set_num_threads(2)``;
* ``compiled`` (with ``--compile``): ``torch.compile(loss, fullgraph=True)``
  (inductor: forward and backward graphs, elementwise work fused into generated
  C++ kernels; fused Adam stays one kernel), its compile seconds recorded.

Besides: the median milliseconds of each fragment of a whole iteration (one
frame), and a profile of the eager step on 1 and on 2 threads (``torch.profiler``) that splits its
operators' self time into matrix products (``mm``, ``addmm``, ``bmm``,
``baddbmm``), fused Adam and every other operator (elementwise, reductions,
copies); the rest of the step's wall time is Python, dispatch and the autograd
engine.

Run: ``python -m benchmarks.sac_update [--compile]`` (writes ``results/sac_update.json``).

Example:
    >>> from benchmarks.sac_update import kernel_split
    >>> kernel_split({"aten::bmm": 3.0, "aten::relu": 1.0, "aten::_fused_adam_": 1.0}, 10.0)
    {'matmul': 0.3, 'adam': 0.1, 'other ops': 0.1, 'python/dispatch/autograd': 0.5}
"""
from __future__ import annotations

import argparse
import itertools
import logging
import os
import time
from typing import Any

from benchmarks._common import alternate, median, print_table, write_json

logger = logging.getLogger(__name__)

MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})


def kernel_split(self_ms: dict[str, float], step_ms: float) -> dict[str, float]:
    """Shares of one step's wall time: matrix products, fused Adam, other ops, the rest.

    Args:
        self_ms: Self time per profiled leaf operator (milliseconds per step).
        step_ms: The step's wall time in the same profile.

    Returns:
        ``{"matmul", "adam", "other ops", "python/dispatch/autograd"}`` as fractions of ``step_ms``.
    """
    matmul = sum(v for k, v in self_ms.items() if k in MATMUL_OPS)
    adam = sum(v for k, v in self_ms.items() if k == "aten::_fused_adam_")
    other = sum(v for k, v in self_ms.items() if k.startswith("aten::") and k not in MATMUL_OPS
                and k != "aten::_fused_adam_")
    rest = max(0.0, step_ms - matmul - adam - other)
    return {k: round(v / step_ms, 3) for k, v in
            (("matmul", matmul), ("adam", adam), ("other ops", other), ("python/dispatch/autograd", rest))}


def build(batch_size: int, env_id: str = "HalfCheetah-v5", hidden: tuple[int, ...] = (256, 256),
          learning_starts: int = 1000, seed: int = 0) -> tuple[Any, Any]:
    """A SAC loop shaped as ``algo=sac_mujoco`` (one env, one gradient step per frame, lr 3e-4) after
    ``learning_starts`` random frames, and one replay sample of ``batch_size``."""
    from torchfrag.algos.replay import REPLAY_KEYS
    from torchfrag.algos.sac import SACConfig, make_sac

    cfg = SACConfig(num_envs=1, steps=1, updates=1, batch_size=batch_size, learning_starts=learning_starts,
                    lr=3e-4, hidden=list(hidden))
    loop = make_sac(env_id, cfg, seed=seed)
    sample = loop.to_device(loop.sample(loop.write(loop.rollout().select(*REPLAY_KEYS))))
    return loop, sample


def timed(learn: Any, sample: Any, steps: int, threads: int = 1) -> float:
    """Milliseconds (wall) per gradient step over ``steps`` steps on ``threads`` torch threads, after two
    warm-up steps (the thread count is restored after)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for _ in range(2):
            learn(sample)
        start = time.perf_counter()
        for _ in range(steps):
            learn(sample)
        return (time.perf_counter() - start) / steps * 1e3
    finally:
        torch.set_num_threads(before)


def iteration_split(loop: Any, iterations: int) -> dict[str, float]:
    """Median milliseconds of each fragment of a SAC iteration (``rollout`` ... ``target``), run by hand."""
    import statistics

    from torchfrag.algos.replay import REPLAY_KEYS

    parts: dict[str, list[float]] = {k: [] for k in ("rollout", "write", "sample", "to_device", "learn", "target")}
    for i in range(iterations + 2):
        marks = [time.perf_counter()]
        batch = loop.rollout()
        marks.append(time.perf_counter())
        batch = loop.write(batch.select(*REPLAY_KEYS))
        marks.append(time.perf_counter())
        sample = loop.sample(batch)
        marks.append(time.perf_counter())
        sample = loop.to_device(sample)
        marks.append(time.perf_counter())
        metrics = loop.learn(sample)
        marks.append(time.perf_counter())
        loop.target(metrics)
        marks.append(time.perf_counter())
        if i >= 2:  # two warm-up iterations
            for k, (a, b) in zip(parts, itertools.pairwise(marks)):
                parts[k].append((b - a) * 1e3)
    return {k: round(statistics.median(v), 3) for k, v in parts.items()}


def profile_step(learn: Any, sample: Any, steps: int, threads: int = 1) -> dict[str, Any]:
    """One ``torch.profiler`` run of ``steps`` eager steps on ``threads`` torch threads: the kernel split
    and the top operators."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for _ in range(2):
            learn(sample)
        start = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                learn(sample)
        step_ms = (time.perf_counter() - start) / steps * 1e3
    finally:
        torch.set_num_threads(before)
    self_ms = {e.key: e.self_cpu_time_total / 1e3 / steps for e in prof.key_averages()}
    top = sorted(self_ms.items(), key=lambda kv: -kv[1])[:12]
    return {"step_ms": step_ms, "split": kernel_split(self_ms, step_ms),
            "top_ops_ms": {k: round(v, 3) for k, v in top}}


def cleanrl_side(loop: Any, sample: Any) -> Any:
    """CleanRL's gradient step (:class:`benchmarks.sac_peers.CleanRLStyleUpdate`) on ``sample``, networks
    shaped as ``loop``'s: a callable ``(sample, steps) -> ms per step`` like :func:`timed`'s."""
    from benchmarks.sac_peers import CleanRLStyleUpdate, SACPeerConfig

    spec = loop.env.action_spec_unbatched
    obs_dim = loop.env.observation_spec["observation"].shape[-1]
    hidden = loop.cfg.hidden[0]
    upd = CleanRLStyleUpdate(obs_dim, spec.space.low.numpy(), spec.space.high.numpy(),
                             SACPeerConfig(hidden=hidden, gamma=loop.cfg.gamma))
    o, a = sample["observation"], sample["action"]
    r, no = sample["next", "reward"], sample["next", "observation"]
    d = sample["next", "terminated"].float()
    count = itertools.count()

    def run(steps: int) -> float:
        for _ in range(2):
            upd.step(o, a, r, no, d, next(count))
        start = time.perf_counter()
        for _ in range(steps):
            upd.step(o, a, r, no, d, next(count))
        return (time.perf_counter() - start) / steps * 1e3

    return run


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="alternating blocks per side (default 5)")
    p.add_argument("--steps", type=int, default=30, help="gradient steps per block (default 30)")
    p.add_argument("--compile", action="store_true", help="also time torch.compile(loss, fullgraph=True)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from torchfrag.fragments import Learn

    torch.set_num_threads(1)
    loop, sample = build(256)
    bf16, bf16_sample = build(256)
    bf16.loss.matmul_dtype = torch.bfloat16  # what algo.matmul_dtype=bfloat16 builds
    small, small_sample = build(8)
    cleanrl = cleanrl_side(loop, sample)
    sides = {"eager": lambda: timed(loop.learn, sample, args.steps),
             "bf16": lambda: timed(bf16.learn, bf16_sample, args.steps),
             "CleanRL-style": lambda: cleanrl(args.steps),
             "batch 8": lambda: timed(small.learn, small_sample, args.steps),
             "2 threads": lambda: timed(loop.learn, sample, args.steps, threads=2)}
    extra: dict[str, Any] = {}
    if args.compile:
        # A second loop, so that the eager side's networks and optimizer are not the compiled ones.
        cloop, csample = build(256)
        learn = cloop.learn
        compiled = Learn(torch.compile(cloop.loss, fullgraph=True), learn.optimizer,
                         minibatch_size=learn.minibatch_size, select_keys=learn.select_keys)
        start = time.perf_counter()
        compiled(csample)
        extra["compile_seconds"] = time.perf_counter() - start
        logger.info("compiled in %.1f s", extra["compile_seconds"])
        sides["compiled"] = lambda: timed(compiled, csample, args.steps)
    load_before = os.getloadavg()[0]
    ms = alternate(sides, args.repeats)
    load_after = os.getloadavg()[0]
    prof = profile_step(loop.learn, sample, args.steps)
    prof2 = profile_step(loop.learn, sample, args.steps, threads=2)
    iteration = iteration_split(loop, args.steps * args.repeats)
    base = median(ms["eager"])
    rows = [[name, f"{median(v):.2f}", f"{min(v):.2f}", f"{median(v) / base:.2f}x"] for name, v in ms.items()]
    text = print_table(["side", "median ms/step", "min ms/step", "/ eager"], rows,
                       title=f"SAC gradient step, HalfCheetah-v5, 256x256, batch 256 "
                             f"(load {load_before:.1f}-{load_after:.1f})")
    split = ", ".join(f"{k} {v:.0%}" for k, v in prof["split"].items())
    print(f"eager step under the profiler: {prof['step_ms']:.2f} ms: {split}")
    split2 = ", ".join(f"{k} {v:.0%}" for k, v in prof2["split"].items())
    print(f"on 2 threads: {prof2['step_ms']:.2f} ms: {split2}")
    print("one iteration, median ms per fragment:", iteration)
    write_json("sac_update", {"ms_per_step": ms, "load_1min": [load_before, load_after],
                              "profile": prof, "profile_2_threads": prof2, "iteration_ms": iteration, "table": text, "steps": args.steps, **extra})
    for lp in (loop, bf16, small) + ((cloop,) if args.compile else ()):
        lp.close()


if __name__ == "__main__":
    main()
