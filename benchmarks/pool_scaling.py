"""C++ pool thread scaling against EnvPool: Pong async and HalfCheetah with 1 to 16 threads.

For each task and each thread count T of ``--threads`` (default 1, 2, 4, 8,
16, capped at ``os.cpu_count()``), the same run measures torchfrag's C++ pool
and EnvPool with T threads, in rounds, rotating and reversing their order,
each system built, timed and closed on its own (``measure_isolated`` of
``benchmarks/_common.py``, the systems of ``benchmarks/atari.py`` and
``benchmarks/mujoco.py``: the same task definitions, actions and async
``send``/``recv`` loop). Both run in async mode with ``num_envs =
envs_per_thread x T`` and ``batch_size = num_envs // 2`` (EnvPool's
recommended async shape at 2 envs per thread: a batch per thread count).

Reported per task and T (medians of the rounds): frames/s of both systems
(Pong: 4 emulator frames per agent step; HalfCheetah: one frame per env
step), the ratio torchfrag / EnvPool, and each system's scaling efficiency
``x_T / (T * x_1)`` (1.0: linear scaling). The CPU model (and GPU model, if
any), core count and load average are recorded. Results:
``benchmarks/results/pool_scaling.{json,png}`` (frames/s against threads,
both systems, with the linear-scaling line from each one's 1-thread figure).

EnvPool's own headline for reference: about 49k Atari frames/s on a 12-core
laptop, and 3x gym.vector.

Usage (on the lent 16-core machine, about 5 minutes)::

    python -m benchmarks.pool_scaling
    python -m benchmarks.pool_scaling --quick     # threads 1 and 2, short rounds (smoke run)

``python -m benchmarks.device --sections scaling`` runs the same measurement
as a section of the device benchmark.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks._common import RESULTS_DIR, Runner, machine_info, measure_isolated

#: Thread counts measured by default (capped at the machine's cores).
THREADS = (1, 2, 4, 8, 16)
SYSTEMS = ("torchfrag", "envpool")


def _tasks() -> dict[str, dict[str, Any]]:
    from benchmarks import atari, mujoco

    return {
        "Pong-v5": {"makers": {"torchfrag": lambda n, t: atari.make_torchfrag("Pong", n, "async", t),
                               "envpool": lambda n, t: atari.make_envpool("Pong", n, "async", t)},
                    "frames_per_step": atari.FRAME_SKIP, "envs_per_thread": 2},
        "HalfCheetah-v5": {
            "makers": {"torchfrag": lambda n, t: mujoco.make_torchfrag("HalfCheetah-v5", n, "async", t),
                       "envpool": lambda n, t: mujoco.make_envpool("HalfCheetah-v5", n, "async", t)},
            "frames_per_step": 1, "envs_per_thread": 4},
    }


def thread_counts(requested: Sequence[int], cores: int | None = None) -> list[int]:
    """The requested thread counts that fit on this machine (at most ``cores``), sorted, unique.

    Raises:
        ValueError: a count is below 1, or none fits.

    Example:
        >>> thread_counts([1, 2, 4, 8, 16], cores=6)
        [1, 2, 4]
    """
    cores = cores or os.cpu_count() or 1
    bad = [t for t in requested if int(t) < 1]
    if bad:
        raise ValueError(f"threads must be >= 1, got {bad}")
    out = sorted({int(t) for t in requested if int(t) <= cores})
    if not out:
        raise ValueError(f"threads={list(requested)}: none fits on {cores} cores")
    return out


def efficiency(rates: dict[int, float]) -> dict[int, float]:
    """Scaling efficiency ``x_T / (T * x_1)`` per thread count (NaN without a 1-thread figure).

    Example:
        >>> efficiency({1: 100.0, 2: 180.0, 4: 300.0})
        {1: 1.0, 2: 0.9, 4: 0.75}
    """
    base = rates.get(1)
    return {t: (r / (t * base) if base else float("nan")) for t, r in rates.items()}


def measure(task: str, threads: list[int], rounds: int, seconds: float,
            systems: Sequence[str] = SYSTEMS, envs_per_thread: int | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Frames/s of each system at each thread count for ``task`` (medians of ``rounds``)."""
    spec = _tasks()[task]
    per_thread = envs_per_thread or spec["envs_per_thread"]
    fps = spec["frames_per_step"]
    rows = []
    for t in threads:
        n = max(2, per_thread * t)
        makers: dict[str, Callable[[], Runner]] = {
            name: (lambda name=name: spec["makers"][name](n, t)) for name in systems}
        rates, _ = measure_isolated(makers, rounds, seconds)
        frames = {name: [r * fps for r in v] for name, v in rates.items()}
        med = {name: statistics.median(v) for name, v in frames.items()}
        rows.append({"threads": t, "num_envs": n, "batch_size": n // 2,
                     "median_frames_per_s": med, "samples_frames_per_s": frames})
        log(f"{task:15s} threads={t:2d} envs={n:3d} " + "  ".join(
            f"{k}={v:,.0f}" for k, v in med.items()))
    eff = {name: efficiency({r["threads"]: r["median_frames_per_s"][name] for r in rows})
           for name in systems}
    for r in rows:
        m = r["median_frames_per_s"]
        r["efficiency"] = {name: eff[name][r["threads"]] for name in systems}
        if "torchfrag" in m and "envpool" in m:
            r["ratio_torchfrag_over_envpool"] = m["torchfrag"] / m["envpool"]
    return {"task": task, "mode": "async", "frames_per_step": fps, "envs_per_thread": per_thread,
            "rows": rows}


def table(results: list[dict[str, Any]]) -> str:
    """Markdown table: frames/s of both systems, ratio, scaling efficiencies."""
    lines = ["| task | threads | envs | torchfrag frames/s | envpool frames/s | torchfrag / envpool "
             "| torchfrag efficiency | envpool efficiency |", "|" + "---|" * 8]
    for res in results:
        for r in res["rows"]:
            m, e = r["median_frames_per_s"], r["efficiency"]

            def cell(d: dict[str, float], k: str, f: str) -> str:
                return format(d[k], f) if k in d else "-"
            ratio = r.get("ratio_torchfrag_over_envpool")
            lines.append(f"| {res['task']} | {r['threads']} | {r['num_envs']} | "
                         f"{cell(m, 'torchfrag', ',.0f')} | {cell(m, 'envpool', ',.0f')} | "
                         f"{'-' if ratio is None else f'{ratio:.2f}x'} | "
                         f"{cell(e, 'torchfrag', '.2f')} | {cell(e, 'envpool', '.2f')} |")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: str, title: str) -> str:
    """Frames/s against threads per task, both systems, with each one's linear-scaling line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.3), squeeze=False)
    for ax, res in zip(axes[0], results):
        ts = [r["threads"] for r in res["rows"]]
        for k, name in enumerate(SYSTEMS):
            ys = [r["median_frames_per_s"].get(name, float("nan")) for r in res["rows"]]
            line, = ax.plot(ts, ys, "o-", label=name)
            if ts and ts[0] == 1 and ys[0] == ys[0]:
                ax.plot(ts, [ys[0] * t for t in ts], "--", color=line.get_color(), alpha=0.4,
                        label=f"{name} x threads")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ts, [str(t) for t in ts])
        ax.set_xlabel("threads")
        ax.set_ylabel("frames / s" + (" (4 per agent step)" if res["frames_per_step"] == 4 else ""))
        ax.set_title(f"{res['task']} async")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(threads: Sequence[int] = THREADS, quick: bool = False, rounds: int | None = None,
        seconds: float | None = None, tasks: Sequence[str] | None = None,
        systems: Sequence[str] = SYSTEMS, out: str | None = None) -> dict[str, Any]:
    """Runs the scaling measurement, prints the table, writes the JSON and PNG; returns the report."""
    from benchmarks._common import cpu_model
    from benchmarks.device import gpu_model

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    counts = thread_counts([1, 2] if quick else threads)
    rounds = rounds or (3 if quick else 5)
    seconds = seconds or (0.5 if quick else 1.5)
    tasks = list(tasks or _tasks())
    unknown = [t for t in tasks if t not in _tasks()]
    if unknown:
        raise ValueError(f"tasks {unknown} not measured; choose from {list(_tasks())}")
    out = out or os.path.join(RESULTS_DIR, "pool_scaling")
    cpu, gpu = cpu_model(), gpu_model()
    load_start = os.getloadavg()
    started = time.time()
    print(f"CPU: {cpu} ({os.cpu_count()} cores); GPU: {gpu or 'none'}; threads {counts}", flush=True)
    results = [measure(t, counts, rounds, seconds, systems,
                       log=lambda s: print(s, flush=True)) for t in tasks]
    report = {"benchmark": "pool_scaling", "machine": machine_info(), "cpu_model": cpu,
              "gpu_model": gpu, "quick": quick, "threads": counts, "rounds": rounds,
              "seconds_per_sample": seconds, "load_average_at_start": load_start,
              "load_average_at_end": os.getloadavg(), "wall_s": time.time() - started,
              "unit": "frames per second (Pong: 4 emulator frames per agent step)",
              "results": results}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    plot(results, out + ".png", f"C++ pool vs EnvPool thread scaling, {cpu} ({os.cpu_count()} "
         f"cores), 1-min load {load_start[0]:.1f}; medians of {rounds}")
    print()
    print(table(results))
    print(f"\nwrote {out}.json and {out}.png", flush=True)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="threads 1 and 2, short rounds")
    parser.add_argument("--threads", nargs="*", type=int, default=list(THREADS),
                        help="thread counts (capped at the machine's cores)")
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--systems", nargs="*", default=list(SYSTEMS))
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--out", default=None, help="output path without extension")
    args = parser.parse_args(argv)
    run(args.threads, args.quick, args.rounds, args.seconds, args.tasks, args.systems, args.out)


if __name__ == "__main__":
    main()
