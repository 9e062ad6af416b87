"""The pool's wait policy (``wait_policy=``, ``spin_us=``): checked options, same results
under every policy, idle threads that use no CPU, Ctrl-C still prompt while spinning."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from torchfrag.envs import PoolEnv, make
from torchfrag.envs.gymnasium_adapter import make_gymnasium

POLICIES = ["adaptive", "spin", "block"]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"wait_policy": "busy"}, ValueError, "wait_policy must be 'adaptive', 'spin' or 'block', got 'busy'"),
    ({"wait_policy": 1}, TypeError, "wait_policy must be a str"),
    ({"spin_us": -1}, ValueError, r"spin_us must be a number in \[0, 10000\]"),
    ({"spin_us": 20000}, ValueError, r"spin_us must be a number in \[0, 10000\].*got 20000"),
    ({"spin_us": float("nan")}, ValueError, r"spin_us must be a number in \[0, 10000\]"),
    ({"spin_us": "50"}, TypeError, "spin_us must be a number of microseconds or None, got str"),
    ({"spin_us": True}, TypeError, "spin_us must be a number"),
    ({"wait_policy": "block", "spin_us": 10}, ValueError, "'block' never spins"),
])
def test_bad_wait_options_are_refused_with_one_clear_error(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        make("CartPole-v1", num_envs=2, **kwargs)


def test_policies_report_their_spin_window() -> None:
    expected = {("adaptive", None): 50.0, ("spin", None): 2000.0, ("block", None): 0.0,
                ("adaptive", 0): 0.0, ("spin", 300): 300.0, ("block", 0): 0.0}
    for (policy, spin_us), window in expected.items():
        with make("CartPole-v1", num_envs=2, wait_policy=policy, spin_us=spin_us) as pool:
            assert (pool.wait_policy, pool.spin_us) == (policy, window)


def _trajectory(policy: str, threads: int, mode: str) -> list[np.ndarray]:
    """Observations of 16 Pendulums over 40 steps, sync or async (batches in any order)."""
    n = 16
    rng = np.random.default_rng(1)
    actions = rng.uniform(-2, 2, (40, n, 1)).astype(np.float32)
    with make("Pendulum-v1", num_envs=n, batch_size=n if mode == "sync" else n // 2,
              num_threads=threads, seed=3, wait_policy=policy) as pool:
        if mode == "sync":
            out = [pool.reset()[0].copy()]
            out += [pool.step(a)[0].copy() for a in actions]
            return out
        # Async: each env's own sequence of observations, whatever order batches come in.
        per_env: list[list[np.ndarray]] = [[] for _ in range(n)]
        steps = np.zeros(n, dtype=np.int64)
        pool.async_reset()
        for _ in range(2 * 40):
            obs, _, _, _, info = pool.recv()
            ids = info["env_id"]
            for row, env in enumerate(ids):
                per_env[env].append(obs[row].copy())
            live = ids[steps[ids] < 39]
            if len(live):
                pool.send(actions[steps[live], live], live)
                steps[live] += 1
            if sum(len(p) for p in per_env) >= n * 40:
                break
        return [np.stack(p[:40]) for p in per_env]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_policy_and_thread_count_gives_the_same_trajectories(mode: str) -> None:
    reference = _trajectory("adaptive", 1, mode)
    for policy in POLICIES:
        for threads in (1, 3):
            got = _trajectory(policy, threads, mode)
            assert all(np.array_equal(a, b) for a, b in zip(reference, got)), (policy, threads)


def _thread_cpu_ns(tids: set[str]) -> int:
    """CPU time of the given threads of this process, in ns (schedstat's first field)."""
    total = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
@pytest.mark.parametrize("policy", POLICIES)
def test_an_idle_pools_threads_use_no_cpu(policy: str) -> None:
    before = set(os.listdir("/proc/self/task"))
    pool = make("HalfCheetah-v5", num_envs=8, num_threads=2, seed=0, wait_policy=policy)
    try:
        workers = set(os.listdir("/proc/self/task")) - before
        assert len(workers) >= 2
        pool.reset()
        actions = np.zeros((8, 6), dtype=np.float32)
        busy0 = _thread_cpu_ns(workers)
        for _ in range(50):  # enough work that the workers run (and spin between steps)
            pool.step(actions)
        assert _thread_cpu_ns(workers) > busy0  # the probe sees the workers' work
        time.sleep(0.01)  # longer than any spin window (10 ms at most)
        idle0 = _thread_cpu_ns(workers)
        time.sleep(0.5)
        idle_ms = (_thread_cpu_ns(workers) - idle0) / 1e6
        # Asleep on a futex: nothing at all in practice; 5 ms allows a stray wake-up.
        assert idle_ms < 5.0, f"{policy}: idle workers used {idle_ms:.1f} ms of CPU in 0.5 s"
    finally:
        pool.close()


def test_the_wait_options_reach_every_face() -> None:
    env = PoolEnv("CartPole-v1", num_envs=2, wait_policy="block")
    try:
        assert env._pool.wait_policy == "block"
        env.rollout(3)
    finally:
        env.close()
    vec = make_gymnasium("CartPole-v1", 2, wait_policy="spin", spin_us=100)
    try:
        assert (vec.pool.wait_policy, vec.pool.spin_us) == ("spin", 100.0)
        vec.reset(seed=0)
        vec.step(np.zeros(2, dtype=np.int64))
    finally:
        vec.close()


def test_the_cli_accepts_the_wait_options_and_refuses_bad_ones() -> None:
    from omegaconf import OmegaConf

    from torchfrag.train import _check_env_options

    good = OmegaConf.create({"env": {"id": "CartPole-v1",
                                     "options": {"wait_policy": "block", "spin_us": 0}}})
    _check_env_options(good)  # the pool's own keywords pass through to EnvPool
    bad = OmegaConf.create({"env": {"id": "CartPole-v1", "options": {"wait_polcy": "block"}}})
    with pytest.raises(ValueError, match="unknown option 'wait_polcy'"):
        _check_env_options(bad)


@pytest.mark.parametrize("call", ["recv", "step"])
def test_ctrl_c_is_prompt_while_threads_spin(call: str) -> None:
    """The longest spin window (10 ms) stays below the 20 ms interrupt poll."""
    script = textwrap.dedent(f"""
        import os, signal, threading, time
        import numpy as np
        from torchfrag.envs import make
        pool = make("Debug-v0", num_envs=2, num_threads=2, episode_length=0,
                    step_sleep_us=1.5e6, wait_policy="spin", spin_us=10000)
        if "{call}" == "recv":
            pool.async_reset(); pool.recv(); pool.send(np.zeros(2, dtype=np.int64))
        else:
            pool.reset(); pool.step(np.zeros(2, dtype=np.int64))  # measured: the caller waits
        def ctrl_c():
            time.sleep(0.2); os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=ctrl_c, daemon=True).start()
        t0 = time.monotonic()
        try:
            pool.recv() if "{call}" == "recv" else pool.step(np.zeros(2, dtype=np.int64))
        except KeyboardInterrupt:
            print("elapsed", time.monotonic() - t0)
        pool.close()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False,
                         timeout=120)
    assert out.returncode == 0 and "elapsed" in out.stdout, out.stdout + out.stderr[-3000:]
    # Interrupted at ~0.2 s, long before the 1.5 s env step ends.
    assert float(out.stdout.split("elapsed")[1].split()[0]) < 1.0, out.stdout
