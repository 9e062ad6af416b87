"""EnvPool's catalogue families: torchfrag's pool vs envpool 1.2.5 on the same ids.

For each family the same ids, batch size, thread count and random actions run
on both pools, in sync mode, alternating sides; the table reports the median
env steps per second and our ratio.  Results go to
``benchmarks/results/catalog_<family>.json`` and ``.png``.

Usage:
    python -m benchmarks.catalog --family minigrid           # a few minutes
    python -m benchmarks.catalog --family minigrid --quick   # fewer ids and repeats
"""
from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

import numpy as np

from benchmarks._common import (
    alternate,
    bar_plot,
    fmt_rate,
    fmt_ratio,
    median,
    print_table,
    rate,
    write_json,
)

log = logging.getLogger("benchmarks.catalog")

# Per family: the ids measured (all share envpool's names) and the --quick subset.
FAMILIES: dict[str, tuple[list[str], list[str]]] = {
    "minigrid": (
        ["MiniGrid-Empty-8x8-v0", "MiniGrid-DoorKey-8x8-v0", "MiniGrid-FourRooms-v0",
         "MiniGrid-LavaCrossingS9N1-v0", "MiniGrid-KeyCorridorS3R3-v0",
         "MiniGrid-MultiRoom-N2-S4-v0", "MiniGrid-Dynamic-Obstacles-8x8-v0",
         "MiniGrid-Fetch-8x8-N3-v0", "MiniGrid-GoToDoor-8x8-v0", "MiniGrid-MemoryS9-v0"],
        ["MiniGrid-Empty-8x8-v0", "MiniGrid-DoorKey-8x8-v0", "MiniGrid-FourRooms-v0"],
    ),
}


def _discrete_actions(num_actions: int, n: int, count: int = 64) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, num_actions, size=n).astype(np.int64) for _ in range(count)]


def _sync_runner(step_fn: Callable[[np.ndarray], object], acts: list[np.ndarray], n: int,
                 min_time: float) -> Callable[[], float]:
    k = [0]

    def step() -> int:
        k[0] += 1
        step_fn(acts[k[0] % len(acts)])
        return n
    return lambda: rate(step, min_time)


def torchfrag_runner(env_id: str, n: int, threads: int, min_time: float
                     ) -> tuple[Callable[[], float], Callable[[], None]]:
    from torchfrag.envs import make

    pool = make(env_id, num_envs=n, num_threads=threads, seed=0)
    pool.reset()
    acts = _discrete_actions(int(pool.action_space.n), n)
    return _sync_runner(pool.step, acts, n, min_time), pool.close


def envpool_runner(env_id: str, n: int, threads: int, min_time: float
                   ) -> tuple[Callable[[], float], Callable[[], None]]:
    import envpool

    env = envpool.make(env_id, env_type="gymnasium", num_envs=n, batch_size=n,
                       num_threads=threads, seed=0)
    env.reset()
    acts = _discrete_actions(int(env.action_space.n), n)
    ids = np.arange(n, dtype=np.int32)
    return _sync_runner(lambda a: env.step(a, ids), acts, n, min_time), env.close


def run(env_ids: list[str], sizes: list[int], repeats: int, min_time: float, threads: int
        ) -> dict:
    records = []
    for env_id in env_ids:
        for n in sizes:
            runners, closers = {}, []
            for name, make_runner in (("torchfrag", torchfrag_runner), ("envpool", envpool_runner)):
                fn, close = make_runner(env_id, n, threads, min_time)
                runners[name] = fn
                closers.append(close)
            log.info("measuring %s n=%d", env_id, n)
            samples = alternate(runners, repeats)
            for close in closers:
                close()
            med = {k: median(v) for k, v in samples.items()}
            records.append({"env_id": env_id, "num_envs": n, "mode": "sync", "threads": threads,
                            "samples": samples, "median": med,
                            "ratio_vs_envpool": med["torchfrag"] / med["envpool"]})
    return {"records": records}


def report(result: dict, family: str) -> None:
    rows = [[r["env_id"], r["num_envs"], fmt_rate(r["median"]["envpool"]),
             fmt_rate(r["median"]["torchfrag"]), fmt_ratio(r["ratio_vs_envpool"])]
            for r in result["records"]]
    ratios = [r["ratio_vs_envpool"] for r in result["records"]]
    result["median_ratio_vs_envpool"] = median(ratios)
    rows.append(["median", "", "", "", fmt_ratio(median(ratios))])
    print_table(["env", "envs", "envpool", "torchfrag", "vs envpool"], rows,
                title=f"{family}: env steps/s (medians; ratio = torchfrag / envpool)")
    name = f"catalog_{family}"
    groups = [f"{r['env_id'].removeprefix('MiniGrid-')} n={r['num_envs']}"
              for r in result["records"]]
    series = {k: [r["median"][k] for r in result["records"]] for k in ("torchfrag", "envpool")}
    threads = result["settings"]["threads"]
    print("wrote", write_json(name, result))
    print("wrote", bar_plot(name, groups, series, "env steps / s",
                            f"{family}: torchfrag vs envpool 1.2.5 ({threads} threads)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", choices=sorted(FAMILIES), required=True)
    parser.add_argument("--quick", action="store_true", help="fewer ids and repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--min-time", type=float, default=None, help="seconds per measurement")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ids, quick_ids = FAMILIES[args.family]
    if args.quick:
        ids, sizes, repeats, min_time = quick_ids, [64], args.repeats or 3, args.min_time or 0.3
    else:
        sizes, repeats, min_time = [16, 256], args.repeats or 5, args.min_time or 0.4
    result = run(ids, sizes, repeats, min_time, args.threads)
    result["settings"] = {"family": args.family, "repeats": repeats, "min_time": min_time,
                          "threads": args.threads, "mode": "sync"}
    report(result, args.family)


if __name__ == "__main__":
    main()
