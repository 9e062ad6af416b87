"""A short demo: step a pool of CartPoles sync and async and report throughput.

Run with ``python -m torchfrag.demo``.
"""
from __future__ import annotations

import argparse
import logging
import time

import numpy as np

from torchfrag.envs import make

logger = logging.getLogger("torchfrag.demo")


def throughput(env_id: str = "CartPole-v1", num_envs: int = 256, seconds: float = 2.0,
               num_threads: int | None = None) -> dict[str, float]:
    """Measures env steps/s of the sync and async APIs.

    Example:
        >>> rates = throughput(num_envs=8, seconds=0.05)
        >>> sorted(rates)
        ['async', 'sync']
    """
    pool = make(env_id, num_envs=num_envs, num_threads=num_threads, seed=0)
    rng = np.random.default_rng(0)
    actions = [pool.random_actions(rng=rng) for _ in range(8)]
    pool.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        pool.step(actions[steps % 8])
        steps += 1
    sync_rate = steps * num_envs / (time.perf_counter() - start)
    pool.close()

    bs = max(1, num_envs // 2)
    pool = make(env_id, num_envs=num_envs, batch_size=bs, num_threads=num_threads, seed=0)
    pool.async_reset()
    frames, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        *_, info = pool.recv()
        pool.send(actions[frames % 8][:bs], info["env_id"])
        frames += bs
    async_rate = frames / (time.perf_counter() - start)
    pool.close()
    return {"sync": sync_rate, "async": async_rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rates = throughput(args.env, args.num_envs, args.seconds)
    for mode, r in rates.items():
        logger.info("%s x%d %-5s %14s env steps/s", args.env, args.num_envs, mode, f"{r:,.0f}")


if __name__ == "__main__":
    main()
