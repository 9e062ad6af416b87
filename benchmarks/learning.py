"""Learning curves of the algorithm zoo against CleanRL's published numbers.

Runs an algorithm on a task for a frame budget over several seeds (under the
local executor), records the training-episode returns against frames, the
wall-clock and frames/s, and writes ``results/learning[_<tag>].json`` and a
PNG with the mean curve and its min-max spread next to CleanRL's reference
return at its budget.

Examples (shell)::

    python -m benchmarks.learning --quick                      # minutes: short runs of every task
    python -m benchmarks.learning --task ppo-cartpole --seeds 0 1 2
    python -m benchmarks.learning --task dqn-cartpole --frames 500000 --tag dqn500k
    python -m benchmarks.learning --merge hc_s0 hc_s12 dqn500k  # one table/plot of earlier runs

Example:
    >>> from benchmarks.learning import TASKS
    >>> TASKS["ppo-cartpole"].reference
    490.0
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks._common import RESULTS_DIR, machine_info, print_table, write_json

logger = logging.getLogger(__name__)


@dataclass
class Task:
    """One benchmark task: an algorithm, an env, a config preset and CleanRL's reference."""

    algo: str
    env: str
    preset: str
    frames: int
    reference: float | None
    reference_frames: int | None
    reference_source: str
    quick_frames: int
    overrides: dict[str, Any] = field(default_factory=dict)


CLEANRL = "CleanRL benchmark tables (docs.cleanrl.dev)"
TASKS = {
    "ppo-cartpole": Task("ppo", "CartPole-v1", "ppo_cleanrl", 500_000, 490.0, 500_000, CLEANRL + ": ppo.py",
                         50_000),
    "dqn-cartpole": Task("dqn", "CartPole-v1", "dqn_cleanrl", 500_000, 488.7, 500_000, CLEANRL + ": dqn.py",
                         30_000),
    "a2c-cartpole": Task("a2c", "CartPole-v1", "a2c", 200_000, None, None, "-", 50_000),
    "impala-cartpole": Task("impala", "CartPole-v1", "impala", 200_000, None, None, "-", 50_000),
    "sac-pendulum": Task("sac", "Pendulum-v1", "sac", 20_000, None, None, "-", 8_000),
    "ppo-halfcheetah": Task("ppo", "HalfCheetah-v5", "ppo_mujoco", 1_000_000, 1442.6, 1_000_000,
                            CLEANRL + ": ppo_continuous_action.py", 20_000),
    "ppo-hopper": Task("ppo", "Hopper-v5", "ppo_mujoco", 1_000_000, 2382.9, 1_000_000,
                       CLEANRL + ": ppo_continuous_action.py", 20_000),
    "sac-halfcheetah": Task("sac", "HalfCheetah-v5", "sac_mujoco", 1_000_000, None, None, "-", 8_000),
    "ppo-pong": Task("ppo", "Pong-v5", "ppo_atari", 10_000_000, 20.4, 10_000_000,
                     CLEANRL + ": ppo_atari.py (10M steps)", 8_192,
                     {"episodic_life": True, "reward_clip": True}),
}
QUICK = ["ppo-cartpole", "dqn-cartpole", "a2c-cartpole", "sac-pendulum", "ppo-halfcheetah", "ppo-pong"]


def _algo_config(task: Task, frames: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from torchfrag.train import compose_config

    cfg = compose_config([f"algo={task.preset}", f"env={task.env}"] if _has_env_conf(task.env)
                         else [f"algo={task.preset}"])
    algo = OmegaConf.to_container(cfg.algo, resolve=True)
    algo["total_frames"] = frames
    for key, value in (overrides or {}).items():
        if key not in algo:
            raise ValueError(f"--set {key}=...: the {task.preset} preset has no field {key!r} "
                             f"(fields: {', '.join(sorted(algo))})")
        algo[key] = value
    return algo


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["obs_norm=true", "lr=1e-3"]`` -> ``{"obs_norm": True, "lr": 0.001}`` (YAML values).

    Examples:
        >>> parse_overrides(["obs_norm=true", "hidden=[64, 64]"])
        {'obs_norm': True, 'hidden': [64, 64]}
    """
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        out[key] = yaml.safe_load(value)
    return out


def variant_name(name: str, overrides: dict[str, Any]) -> str:
    """The name a task's results go under: ``ppo-hopper[obs_norm=True]`` with overrides.

    Examples:
        >>> variant_name("ppo-hopper", {"obs_norm": True})
        'ppo-hopper[obs_norm=True]'
        >>> variant_name("ppo-hopper", {})
        'ppo-hopper'
    """
    if not overrides:
        return name
    return name + "[" + ",".join(f"{k}={v}" for k, v in overrides.items()) + "]"


def _has_env_conf(env_id: str) -> bool:
    from torchfrag.train import config_dir

    return os.path.isfile(os.path.join(config_dir(), "env", f"{env_id}.yaml"))


def run_one(task: Task, seed: int, frames: int, time_limit: float | None,
            overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Trains one seed; returns its curve (frames, mean return of the episodes that ended)."""
    import torch

    from torchfrag.algos import get_algo
    from torchfrag.graph import capture
    from torchfrag.runtime import run

    config_cls, make = get_algo(task.algo)
    cfg = config_cls.from_dict(_algo_config(task, frames, overrides))
    loop = make(task.env, cfg, seed=seed, env_options=task.overrides or None)
    curve: list[tuple[int, float]] = []
    t0 = time.perf_counter()
    f0 = loop.rollout.frames

    last_log = [t0]

    def hook(i: int, metrics: Any, graph: Any) -> bool:
        ep = loop.rollout.stats.pop()
        if ep:
            curve.append((loop.rollout.frames, ep["episode_return"]))
        now = time.perf_counter()
        if now - last_log[0] >= 60.0:  # progress of long runs
            last_log[0] = now
            recent = [r for _, r in curve[-20:]]
            logger.info("%s seed %d: %d/%d frames, %.0f frames/s, recent return %s", task.env, seed,
                        loop.rollout.frames, frames, (loop.rollout.frames - f0) / (now - t0),
                        f"{sum(recent) / len(recent):.1f}" if recent else "-")
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            logger.warning("%s seed %d: time limit %.0fs reached at %d frames", task.env, seed,
                           time_limit, loop.rollout.frames)
            return True
        return loop.rollout.frames >= frames

    torch.manual_seed(seed)
    try:
        run(capture(loop), iterations=10**9, hooks=[hook])
    finally:
        loop.close()
    seconds = time.perf_counter() - t0
    done = loop.rollout.frames
    tail = [r for _, r in curve[-max(1, len(curve) // 10):]]
    return {"seed": seed, "frames": done, "seconds": seconds,
            "fps": (done - f0) / max(seconds, 1e-9), "curve": curve,
            "final_return": sum(tail) / len(tail) if tail else None,
            "completed": done >= frames}


def _mean_curve(runs: list[dict[str, Any]], points: int = 50) -> dict[str, list[float]]:
    """Mean/min/max over seeds of each curve resampled (last value carried) on a common grid."""
    end = min(r["frames"] for r in runs)
    grid = [end * (i + 1) / points for i in range(points)]
    rows = []
    for r in runs:
        vals, j, last = [], 0, float("nan")
        for x in grid:
            while j < len(r["curve"]) and r["curve"][j][0] <= x:
                last = r["curve"][j][1]
                j += 1
            vals.append(last)
        rows.append(vals)
    mean = [sum(c) / len(c) if not any(math.isnan(v) for v in c) else float("nan") for c in zip(*rows)]
    return {"frames": grid, "mean": mean, "min": [min(c) for c in zip(*rows)],
            "max": [max(c) for c in zip(*rows)]}


def plot(results: dict[str, Any], path: str) -> None:
    """One panel per task: mean curve, min-max band, CleanRL's reference at its budget."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    names = list(results["tasks"])
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        res = results["tasks"][name]
        c = res["curve"]
        ax.plot(c["frames"], c["mean"], label=f"torchfrag ({len(res['runs'])} seeds)")
        ax.fill_between(c["frames"], c["min"], c["max"], alpha=0.25)
        if res["reference"] is not None:
            ax.axhline(res["reference"], color="C3", ls="--",
                       label=f"CleanRL {res['reference']} @ {res['reference_frames']:,}")
        ax.set_title(f"{name}  ({res['fps_median']:.0f} frames/s)", fontsize=10)
        ax.set_xlabel("frames")
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """CLI entry point; returns the results written to JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", nargs="*", choices=sorted(TASKS), help="tasks (default: all, or QUICK)")
    p.add_argument("--seeds", nargs="*", type=int, default=None)
    p.add_argument("--frames", type=int, default=None, help="frame budget (default: the task's)")
    p.add_argument("--time-limit", type=float, default=None, help="seconds per seed")
    p.add_argument("--quick", action="store_true", help="short budgets, 1 seed: minutes in all")
    p.add_argument("--tag", default=None, help="results/learning_<tag>.json")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="algo config overrides (YAML values), e.g. obs_norm=true; results go "
                        "under <task>[KEY=VALUE,...]")
    p.add_argument("--merge", nargs="*", default=None, metavar="TAG",
                   help="combine the runs of results/learning_<TAG>.json files (no training)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch

    torch.set_num_threads(1)
    names = args.task or (QUICK if args.quick else list(TASKS))
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    out: dict[str, Any] = {"machine": machine_info(), "quick": args.quick, "tasks": {}}
    if args.merge:
        merged: dict[str, list[dict[str, Any]]] = {}
        variants: dict[str, dict[str, Any]] = {}
        for tag in args.merge:
            with open(os.path.join(RESULTS_DIR, f"learning_{tag}.json")) as f:
                for name, res in json.load(f)["tasks"].items():
                    merged.setdefault(name, []).extend(res["runs"])
                    variants[name] = res.get("algo_overrides", {})
        out["merged_from"] = list(args.merge)
        for name, runs in merged.items():
            out["tasks"][name] = summarize(name, runs, max(r["frames"] for r in runs),
                                           variants[name])
    else:
        try:  # a bad --set fails now, not after other tasks ran
            overrides = parse_overrides(args.set)
            for name in names:
                _algo_config(TASKS[name], 1, overrides)
        except ValueError as e:
            p.error(str(e))
        for name in names:
            task = TASKS[name]
            frames = args.frames or (task.quick_frames if args.quick else task.frames)
            runs = []
            for seed in seeds:
                logger.info("%s seed %d: %d frames", name, seed, frames)
                runs.append(run_one(task, seed, frames, args.time_limit, overrides))
                logger.info("%s seed %d: return %s after %d frames, %.0fs, %.0f frames/s", name,
                            seed, runs[-1]["final_return"], runs[-1]["frames"], runs[-1]["seconds"],
                            runs[-1]["fps"])
            out["tasks"][variant_name(name, overrides)] = summarize(name, runs, frames, overrides)
    table = []
    for name, res in out["tasks"].items():
        ref = res["reference"]
        table.append([name, f"{min(r['frames'] for r in res['runs']):,}",
                      " ".join(str(r["seed"]) for r in res["runs"]),
                      "-" if res["final_return_mean"] is None else f"{res['final_return_mean']:.1f}",
                      " / ".join("-" if r["final_return"] is None else f"{r['final_return']:.1f}"
                                 for r in res["runs"]),
                      "-" if ref is None else f"{ref} @ {res['reference_frames']:,}",
                      f"{res['fps_median']:.0f}", f"{res['seconds_total']:.0f}"])
    print_table(["task", "frames", "seeds", "return (last 10%)", "per seed", "CleanRL", "frames/s",
                 "wall s"], table, title="learning results (torchfrag, local executor, this machine)")
    stem = "learning" + (f"_{args.tag}" if args.tag else ("_quick" if args.quick else ""))
    write_json(stem, out)
    plot(out, os.path.join(RESULTS_DIR, stem + ".png"))
    return out


def summarize(name: str, runs: list[dict[str, Any]], frames: int,
              overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """One task's entry of the results: its runs, the mean final return, frames/s, the mean curve.

    ``name`` may be a variant (``ppo-hopper[obs_norm=True]``): the task is the part before ``[``.
    """
    task = TASKS[name.split("[")[0]]
    finals = [r["final_return"] for r in runs if r["final_return"] is not None]
    fps = sorted(r["fps"] for r in runs)
    return {"algo": task.algo, "env": task.env, "preset": task.preset, "budget": frames,
            "algo_overrides": dict(overrides or {}),
            "reference": task.reference, "reference_frames": task.reference_frames,
            "reference_source": task.reference_source, "runs": runs,
            "final_return_mean": sum(finals) / len(finals) if finals else None,
            "fps_median": fps[len(fps) // 2], "seconds_total": sum(r["seconds"] for r in runs),
            "curve": _mean_curve(runs)}


if __name__ == "__main__":
    main()
