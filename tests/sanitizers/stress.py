"""Pool stress workload for sanitizer builds (ASan+UBSan, TSan, LSan).

Exercises every env family that is built: sync stepping in both auto-reset
modes, async send/recv with random batch sizes and partial sends, partial
resets, errors raised inside envs, close while envs are in flight, close
racing a waiting ``recv``, two threads sharing one pool, and close from one
thread while another thread's send steps envs. Exits non-zero if the pool misbehaves; the
sanitizer runtime reports memory errors and data races on its own.

Usage: python tests/sanitizers/stress.py [--scale 1.0]
"""
from __future__ import annotations

import argparse
import threading

import numpy as np

from torchfrag.envs import EnvError, PoolClosedError, list_envs, make


def representative_ids() -> list[str]:
    """Every classic-control id, Debug-v0, and a couple per larger family."""
    ids = list_envs()
    chosen = [i for i in ids if i in {"CartPole-v1", "Acrobot-v1", "MountainCar-v0",
                                       "MountainCarContinuous-v0", "Pendulum-v1", "Debug-v0"}]
    for wanted in ("Pong-v5", "Breakout-v5", "HalfCheetah-v5", "Ant-v5", "Hopper-v5"):
        if wanted in ids:
            chosen.append(wanted)
    return chosen


def sync_workload(env_id: str, steps: int, rng: np.random.Generator) -> None:
    for autoreset in ("next_step", "same_step"):
        pool = make(env_id, num_envs=6, num_threads=2, seed=int(rng.integers(1 << 30)),
                    autoreset=autoreset)
        pool.reset()
        for t in range(steps):
            pool.step(pool.random_actions(6, rng))
            if t % 17 == 0:
                ids = rng.choice(6, size=int(rng.integers(1, 7)), replace=False)
                pool.reset(ids)
            if t % 23 == 0:
                ids = rng.choice(6, size=3, replace=False)
                pool.step(pool.random_actions(3, rng), ids)
        pool.close()


def async_workload(env_id: str, iterations: int, rng: np.random.Generator) -> None:
    n = 8
    bs = int(rng.integers(1, n + 1))
    pool = make(env_id, num_envs=n, batch_size=bs, num_threads=2)
    pool.async_reset()
    idle: list[int] = []
    received = 0
    for _ in range(iterations):
        *_, info = pool.recv(timeout=60)
        ids = info["env_id"].tolist()
        assert len(set(ids)) == bs
        received += bs
        idle.extend(ids)
        k = int(rng.integers(max(1, bs - pool.in_flight), len(idle) + 1))
        rng.shuffle(idle)
        chosen, idle = idle[:k], idle[k:]
        pool.send(pool.random_actions(len(chosen), rng), chosen)
    # Close with envs still in flight.
    pool.close()
    assert received == iterations * bs


def error_workload(rng: np.random.Generator) -> None:
    pool = make("Debug-v0", num_envs=4, num_threads=2, fail_on_step=[0, 3, 0, 5])
    pool.reset()
    errors = 0
    for _ in range(12):
        try:
            pool.step(np.zeros(4, dtype=np.int64))
        except EnvError as e:
            errors += 1
            pool.reset(e.env_ids)
        except ValueError:
            pool.reset()
    assert errors >= 2
    pool.close()
    pool = make("Debug-v0", num_envs=6, batch_size=2, num_threads=2, fail_on_step=[0, 2, 0, 0, 4, 0])
    pool.async_reset()
    for _ in range(30):
        try:
            *_, info = pool.recv(timeout=60)
            pool.send(np.ones(2, dtype=np.int64), info["env_id"])
        except EnvError as e:
            # The whole batch was dropped: reset the failed envs, resend the others.
            pool.async_reset(e.env_ids)
            others = [i for i in e.batch_env_ids if i not in e.env_ids]
            if others:
                pool.send(np.ones(len(others), dtype=np.int64), others)
    pool.close()


def close_race_workload() -> None:
    for _ in range(5):
        pool = make("Debug-v0", num_envs=8, batch_size=4, num_threads=2, step_sleep_us=2000)
        pool.async_reset()
        pool.recv(timeout=60)
        pool.recv(timeout=60)
        pool.send(np.zeros(8, dtype=np.int64))

        def waiter() -> None:
            try:
                while True:
                    pool.recv(timeout=60)
            except (PoolClosedError, RuntimeError):
                pass

        t = threading.Thread(target=waiter)
        t.start()
        pool.close()
        t.join(timeout=60)
        assert not t.is_alive(), "recv did not return after close"


def two_thread_workload(scale: float) -> None:
    """Two threads on one pool: sync steps against send/recv (one is refused while the other runs)."""
    pool = make("Debug-v0", num_envs=4, num_threads=2, episode_length=0, step_sleep_us=200)
    pool.reset()
    acts = np.zeros(4, dtype=np.int64)
    rounds = max(20, int(200 * scale))

    def stepper() -> None:
        for _ in range(rounds):
            try:
                pool.step(acts)
            except (RuntimeError, ValueError):
                pass  # busy, or the other thread's envs are in flight

    def sender() -> None:
        for _ in range(rounds):
            try:
                pool.send(acts)
            except (RuntimeError, ValueError):
                continue
            pool.recv(timeout=60)

    threads = [threading.Thread(target=stepper), threading.Thread(target=sender)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "two-thread workload hung"
    pool.close()


def close_while_sending_workload() -> None:
    """close() from one thread while another thread's send steps envs inline or on workers."""
    for trial in range(6):
        cheap = trial % 2 == 0  # cheap envs run inline on the sender, slow ones on workers
        pool = make("Debug-v0", num_envs=16, num_threads=2, episode_length=0,
                    step_sleep_us=0 if cheap else 500)
        pool.async_reset()
        pool.recv(timeout=60)
        acts = np.zeros(16, dtype=np.int64)

        def loop() -> None:
            try:
                while True:
                    pool.send(acts)
                    pool.recv(timeout=60)
            except (PoolClosedError, RuntimeError):
                pass

        t = threading.Thread(target=loop)
        t.start()
        threading.Event().wait(0.005 * (trial + 1))
        pool.close()
        t.join(timeout=60)
        assert not t.is_alive(), "sender did not return after close"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies iteration counts")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for env_id in representative_ids():
        heavy = env_id.endswith("-v5")
        steps = max(10, int((40 if heavy else 200) * args.scale))
        sync_workload(env_id, steps, rng)
        async_workload(env_id, steps, rng)
        print(f"ok {env_id}", flush=True)
    error_workload(rng)
    close_race_workload()
    two_thread_workload(args.scale)
    close_while_sending_workload()
    print("stress workload finished", flush=True)


if __name__ == "__main__":
    main()
