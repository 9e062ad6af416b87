"""Resource leaks: memory, file descriptors and threads after many pool lifetimes.

For each env family, 1,000 create/step/close cycles (150 single-env cycles for
Atari, whose every env loads a ROM; after a warm-up that fills allocator caches) must not grow resident memory beyond a few MB, and
threads and open file descriptors must return to their starting counts. The
same holds for ``PoolEnv`` and for a long async run.
"""
from __future__ import annotations

import gc
import os
import threading

import numpy as np
import psutil
import pytest

from torchfrag.envs import list_envs, make

MAX_GROWTH_MB = 8.0


def _family_ids() -> list:
    ids = list_envs()
    out: list = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "Debug-v0"]
    # Native families load ROMs/models per env: slower cycles, still run in CI.
    out += [pytest.param(i, marks=pytest.mark.slow) for i in ("Pong-v5", "HalfCheetah-v5")
            if i in ids]
    return out


def _snapshot() -> tuple[float, int, int]:
    gc.collect()
    proc = psutil.Process(os.getpid())
    return proc.memory_info().rss / 2**20, proc.num_fds(), threading.active_count()


# Building an ALE env loads and resets a ROM (~0.2 s): fewer, single-env cycles for Atari,
# still enough that a leaked emulator (megabytes each) would stand out.
CYCLES = {"Pong-v5": 150}
ENVS_PER_CYCLE = {"Pong-v5": 1}


def _cycles(env_id: str, count: int, rng: np.random.Generator) -> None:
    for _ in range(count):
        pool = make(env_id, num_envs=ENVS_PER_CYCLE.get(env_id, 4), num_threads=2)
        pool.reset()
        for _ in range(3):
            pool.step(pool.random_actions(rng=rng))
        pool.close()


@pytest.mark.parametrize("env_id", _family_ids())
def test_create_step_close_cycles(env_id: str) -> None:
    rng = np.random.default_rng(0)
    count = CYCLES.get(env_id, 1000)
    _cycles(env_id, max(5, count // 20), rng)
    rss0, fds0, threads0 = _snapshot()
    _cycles(env_id, count, rng)
    rss1, fds1, threads1 = _snapshot()
    assert rss1 - rss0 < MAX_GROWTH_MB, f"{env_id}: RSS grew {rss1 - rss0:.1f} MB in {count} cycles"
    assert fds1 == fds0, f"{env_id}: file descriptors {fds0} -> {fds1}"
    assert threads1 == threads0


def test_long_async_run_memory_is_flat() -> None:
    pool = make("CartPole-v1", num_envs=32, batch_size=8, num_threads=2)
    pool.async_reset()
    rng = np.random.default_rng(0)

    def run(batches: int) -> None:
        for _ in range(batches):
            *_, info = pool.recv()
            pool.send(rng.integers(0, 2, size=8), info["env_id"])

    run(20_000)
    rss0, fds0, _ = _snapshot()
    run(200_000)
    rss1, fds1, _ = _snapshot()
    pool.close()
    assert rss1 - rss0 < 2.0, f"RSS grew {rss1 - rss0:.1f} MB over 1.6M async steps"
    assert fds1 == fds0


def test_pool_env_cycles() -> None:
    torchrl_env = pytest.importorskip("torchfrag.envs.torchrl_env")
    import torch

    def cycle() -> None:
        env = torchrl_env.PoolEnv("CartPole-v1", num_envs=4)
        td = env.reset()
        td["action"] = torch.zeros(4, dtype=torch.int64)
        env.step(td)
        env.close()

    for _ in range(50):
        cycle()
    rss0, fds0, threads0 = _snapshot()
    for _ in range(1000):
        cycle()
    rss1, fds1, threads1 = _snapshot()
    assert rss1 - rss0 < MAX_GROWTH_MB, f"PoolEnv: RSS grew {rss1 - rss0:.1f} MB"
    assert fds1 == fds0 and threads1 == threads0
