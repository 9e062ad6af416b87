"""Env-pool throughput: torchfrag vs envpool vs Gymnasium vector envs (classic control, toy text).

Every configuration (env, num_envs, sync/async) measures all systems in the
same run, alternating their order, and reports medians of env steps per
second plus our ratio to each peer. Results go to
``benchmarks/results/envs.json`` and ``envs.png``.

Usage:
    python -m benchmarks.envs            # full table (a few minutes)
    python -m benchmarks.envs --quick    # fewer configs and repeats
    python -m benchmarks.envs --toy-text # FrozenLake-v1 and Taxi (envs_toy_text.json/.png)
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
    pool_stepper,
    print_table,
    rate,
    write_json,
)

log = logging.getLogger("benchmarks.envs")


# Gymnasium 1.4 (and torchfrag) name Taxi v4; envpool 1.2.5 has the same default dynamics as
# Taxi-v3 (v4 changed only the is_rainy / fickle_passenger variants).
_ENVPOOL_IDS = {"Taxi-v4": "Taxi-v3"}


# Action batches drawn once per runner and cycled through: every env replays
# the same ACTION_BATCHES actions (the DMC limit loop replays its controls the
# same way, see benchmarks.catalog._dmc_limit).
ACTION_BATCHES = 64


def _actions(env_id: str, n: int, rng: np.random.Generator,
             count: int = ACTION_BATCHES) -> list[np.ndarray]:
    """Random actions for ``n`` envs from the env's own action space (discrete or box)."""
    from torchfrag.envs import spec

    space = spec(env_id).action_space
    if hasattr(space, "n"):
        return [rng.integers(0, space.n, size=n).astype(np.int64) for _ in range(count)]
    return [rng.uniform(space.low, space.high, size=(n, *space.shape)).astype(np.float32)
            for _ in range(count)]


def torchfrag_runner(env_id: str, n: int, mode: str, threads: int, min_time: float
                     ) -> tuple[Callable[[], float], Callable[[], None]]:
    from torchfrag.envs import make

    acts = _actions(env_id, n, np.random.default_rng(0))
    bs = n if mode == "sync" else n // 2
    pool = make(env_id, num_envs=n, batch_size=bs, num_threads=threads, seed=0)
    step = pool_stepper(pool, acts, mode)
    return (lambda: rate(step, min_time)), pool.close


def envpool_runner(env_id: str, n: int, mode: str, threads: int, min_time: float
                   ) -> tuple[Callable[[], float], Callable[[], None]]:
    import envpool

    acts = _actions(env_id, n, np.random.default_rng(0))
    bs = n if mode == "sync" else n // 2
    env = envpool.make(_ENVPOOL_IDS.get(env_id, env_id), env_type="gymnasium", num_envs=n,
                       batch_size=bs, num_threads=threads, seed=0)
    step = pool_stepper(env, acts, mode)
    return (lambda: rate(step, min_time)), env.close


def pool_runners(env_id: str, n: int, mode: str, threads: int, min_time: float
                 ) -> tuple[dict[str, Callable[[], float]], list[Callable[[], None]]]:
    """torchfrag's and envpool's runners for one configuration, and their closers."""
    runners: dict[str, Callable[[], float]] = {}
    closers = []
    for name, make_runner in (("torchfrag", torchfrag_runner), ("envpool", envpool_runner)):
        fn, close = make_runner(env_id, n, mode, threads, min_time)
        runners[name] = fn
        closers.append(close)
    return runners, closers


def gymnasium_runner(kind: str, env_id: str, n: int, min_time: float
                     ) -> tuple[Callable[[], float], Callable[[], None]]:
    import gymnasium

    mode = "sync" if kind == "gym_sync" else "async"
    envs = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode=mode)
    envs.reset(seed=0)
    acts = _actions(env_id, n, np.random.default_rng(0))
    k = [0]

    def step() -> int:
        k[0] += 1
        envs.step(acts[k[0] % len(acts)])
        return n
    return (lambda: rate(step, min_time)), envs.close


def run(env_ids: list[str], sizes: list[int], modes: list[str], repeats: int, min_time: float,
        threads: int, max_async_procs: int) -> dict:
    records = []
    for env_id in env_ids:
        for n in sizes:
            for mode in modes:
                runners, closers = pool_runners(env_id, n, mode, threads, min_time)
                # Gymnasium vector envs have one (sync) API: measured once per size.
                if mode == "sync":
                    fn, close = gymnasium_runner("gym_sync", env_id, n, min_time)
                    runners["gym_sync"], _ = fn, closers.append(close)
                    if n <= max_async_procs:
                        fn, close = gymnasium_runner("gym_async", env_id, n, min_time)
                        runners["gym_async"], _ = fn, closers.append(close)
                log.info("measuring %s n=%d %s", env_id, n, mode)
                samples = alternate(runners, repeats)
                for close in closers:
                    close()
                med = {k: median(v) for k, v in samples.items()}
                records.append({"env_id": env_id, "num_envs": n, "mode": mode,
                                "threads": threads, "samples": samples, "median": med})
    return {"records": records}


def report(result: dict, out_name: str = "envs", title: str = "Classic control") -> None:
    rows = []
    for r in result["records"]:
        m = r["median"]
        ours = m["torchfrag"]
        rows.append([
            r["env_id"], r["num_envs"], r["mode"],
            fmt_rate(m.get("envpool")), fmt_rate(ours), fmt_ratio(ours / m["envpool"]),
            fmt_rate(m.get("gym_sync")), fmt_ratio(ours / m["gym_sync"]) if "gym_sync" in m else "-",
            fmt_rate(m.get("gym_async")),
            fmt_ratio(ours / m["gym_async"]) if "gym_async" in m else "-",
        ])
        r["ratio_vs_envpool"] = ours / m["envpool"]
    print_table(["env", "envs", "mode", "envpool", "torchfrag", "vs envpool", "gym sync",
                 "vs gym sync", "gym async", "vs gym async"], rows,
                title="env steps/s (medians; ratio = torchfrag / peer)")
    groups = [f"{r['env_id'].split('-')[0]} n={r['num_envs']} {r['mode']}"
              for r in result["records"]]
    series = {}
    for name in ("torchfrag", "envpool", "gym_sync", "gym_async"):
        series[name] = [r["median"].get(name, float("nan")) for r in result["records"]]
    threads = result.get("settings", {}).get("threads", 2)
    print("wrote", write_json(out_name, result))
    print("wrote", bar_plot(out_name, groups, series, "env steps / s",
                            f"{title}: torchfrag vs envpool vs Gymnasium ({threads} threads)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer configs and repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--min-time", type=float, default=None, help="seconds per measurement")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--toy-text", action="store_true",
                        help="FrozenLake-v1 and Taxi-v4 (envpool: Taxi-v3) instead of classic control")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.quick:
        sizes, repeats, min_time = [16, 256], args.repeats or 3, args.min_time or 0.3
    else:
        sizes, repeats, min_time = [16, 64, 256], args.repeats or 5, args.min_time or 0.5
    env_ids = ["FrozenLake-v1", "Taxi-v4"] if args.toy_text else ["CartPole-v1", "Pendulum-v1"]
    result = run(env_ids, sizes, ["sync", "async"], repeats, min_time,
                 args.threads, max_async_procs=64)
    result["settings"] = {"repeats": repeats, "min_time": min_time, "threads": args.threads}
    if args.toy_text:
        report(result, "envs_toy_text", "Toy text")
    else:
        report(result)


if __name__ == "__main__":
    main()
