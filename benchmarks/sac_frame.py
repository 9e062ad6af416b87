"""Where one training frame of ``algo=sac_mujoco`` on HalfCheetah-v5 goes, on one torch thread.

One frame is one SAC iteration as ``python -m torchfrag.train algo=sac_mujoco
env=HalfCheetah-v5`` runs it (one env step, one replay write, one sample of 256,
one gradient step, one target update). This benchmark runs those pieces by
hand, the gradient step split into what :class:`~torchfrag.fragments.Learn`
does (select and flatten the sample, the loss's forward, ``zero_grad``,
backward, the gradient norm, the optimizer step), and times each piece; it
also times whole iterations through the captured graph (``runtime.run``), so
the runtime's own share shows as the difference. The two matmul dtypes
(``float32``, ``bfloat16``) are measured in alternating blocks
(``benchmarks._common.alternate``); each figure is the median over the blocks
of the per-frame mean within a block. The machine's load average is recorded
beside them: on a shared host every figure moves with it.

Run: ``python -m benchmarks.sac_frame [--repeats 5] [--frames 200]`` (writes ``results/sac_frame.json``).

Example:
    >>> from benchmarks.sac_frame import PIECES
    >>> PIECES[:3]
    ('rollout', 'write', 'sample')
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any

from benchmarks._common import median, print_table, write_json

logger = logging.getLogger(__name__)

#: The pieces of one frame, in the order they run.
PIECES = ("rollout", "write", "sample", "select", "loss forward", "zero_grad", "backward", "grad norm",
          "optimizer", "metrics", "target")


def build(matmul_dtype: str, learning_starts: int = 1000, seed: int = 0) -> Any:
    """The loop ``torchfrag.train`` builds for ``algo=sac_mujoco env=HalfCheetah-v5`` (a shorter warm-up)."""
    from omegaconf import OmegaConf

    from torchfrag.algos import factory_from_config
    from torchfrag.train import compose_config

    cfg = compose_config(["algo=sac_mujoco", "env=HalfCheetah-v5", f"algo.matmul_dtype={matmul_dtype}",
                          f"algo.learning_starts={learning_starts}"])
    algo = OmegaConf.to_container(cfg.algo, resolve=True)
    return factory_from_config(algo, cfg.env.id, seed=seed, env_options=dict(cfg.env.options))()


def frame_split(loop: Any, frames: int) -> dict[str, float]:
    """Mean milliseconds per frame of each piece in :data:`PIECES` over ``frames`` frames."""
    import torch

    from torchfrag.algos.replay import REPLAY_KEYS
    from torchfrag.fragments.learn import _MetricSums, _sum_losses, _total_norm

    learn = loop.learn
    sums = dict.fromkeys(PIECES, 0.0)
    for _ in range(frames):
        t = [time.perf_counter()]
        batch = loop.rollout()
        t.append(time.perf_counter())
        batch = loop.write(batch.select(*REPLAY_KEYS))
        t.append(time.perf_counter())
        sample = loop.to_device(loop.sample(batch))
        t.append(time.perf_counter())
        data = sample.select(*learn.select_keys).reshape(-1)
        t.append(time.perf_counter())
        out = learn.loss(data)
        total = _sum_losses(out)
        t.append(time.perf_counter())
        learn.optimizer.zero_grad(set_to_none=True)
        t.append(time.perf_counter())
        total.backward()
        t.append(time.perf_counter())
        gn = _total_norm([p.grad for p in learn._params if p.grad is not None])
        t.append(time.perf_counter())
        learn.optimizer.step()
        t.append(time.perf_counter())
        metrics = _MetricSums()
        metrics.add(out, total, gn)
        metrics = metrics.means()
        t.append(time.perf_counter())
        loop.target(metrics)
        t.append(time.perf_counter())
        for k, a, b in zip(PIECES, t, t[1:]):
            sums[k] += b - a
    return {k: v / frames * 1e3 for k, v in sums.items()}


def run_ms(graph: Any, frames: int) -> float:
    """Milliseconds per frame of ``frames`` iterations through the captured graph (``runtime.run``)."""
    from torchfrag.runtime import run

    start = time.perf_counter()
    run(graph, iterations=frames)
    return (time.perf_counter() - start) / frames * 1e3


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="alternating blocks per dtype (default 5)")
    p.add_argument("--frames", type=int, default=200, help="frames per block (default 200)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch

    from torchfrag.graph import capture

    torch.set_num_threads(1)
    dtypes = ("bfloat16", "float32")
    loops = {d: build(d) for d in dtypes}
    graphs = {d: capture(loops[d]) for d in dtypes}
    for d in dtypes:  # warm-up: allocator, oneDNN primitives, the replay past its first samples
        frame_split(loops[d], 50)
    splits: dict[str, list[dict[str, float]]] = {d: [] for d in dtypes}
    runs: dict[str, list[float]] = {d: [] for d in dtypes}
    loads = [os.getloadavg()[0]]
    for r in range(args.repeats):
        for d in (dtypes if r % 2 == 0 else dtypes[::-1]):
            splits[d].append(frame_split(loops[d], args.frames))
            runs[d].append(run_ms(graphs[d], args.frames))
        loads.append(os.getloadavg()[0])
    result: dict[str, Any] = {"frames_per_block": args.repeats and args.frames, "repeats": args.repeats,
                              "load_avg_1min": [round(x, 2) for x in loads], "threads": 1}
    rows = []
    for d in dtypes:
        parts = {k: round(median([s[k] for s in splits[d]]), 3) for k in PIECES}
        by_hand = round(median([sum(s.values()) for s in splits[d]]), 3)
        through_run = round(median(runs[d]), 3)
        result[d] = {"pieces_ms": parts, "frame_ms_by_hand": by_hand, "frame_ms_run": through_run,
                     "frames_per_s_run": round(1e3 / through_run, 1)}
        rows.append([d, *(f"{parts[k]:.2f}" for k in PIECES), f"{by_hand:.2f}", f"{through_run:.2f}"])
    print_table(["dtype", *PIECES, "sum", "run()"], rows,
                title=f"SAC HalfCheetah, ms per frame, one thread (load {min(loads):.1f}-{max(loads):.1f})")
    logger.info("wrote %s", write_json("sac_frame", result))


if __name__ == "__main__":
    main()
