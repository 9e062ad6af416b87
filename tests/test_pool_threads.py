"""One pool under threads, fork, signals and failed construction.

Every case that used to crash or hang runs in a subprocess with a timeout, so
a regression fails instead of hanging the suite.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from torchfrag.envs import make
from torchfrag.envs.pool import PoolClosedError

BUSY = "in use by another thread"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(code: str, timeout: float = 120.0, env: dict | None = None
               ) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter; a hang fails the test after `timeout` s."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    try:
        # A shell without job control (a CI script run in the background, nohup) starts its
        # children with SIGINT ignored, and Python then installs no KeyboardInterrupt handler: give
        # the child the default disposition, as a terminal does, so Ctrl-C tests test the pool.
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=timeout, cwd=ROOT, env=full_env,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hung for {timeout} s; output so far: {e.stdout!r} {e.stderr!r}")


def both(a, b, timeout: float = 60.0) -> list:
    """Runs a() and b() at the same time on two threads; returns [result or exception] * 2."""
    out: list = [None, None]
    start = threading.Barrier(2)

    def go(k, fn):
        start.wait()
        try:
            out[k] = fn()
        except Exception as e:  # noqa: BLE001 - returned to the caller for checking
            out[k] = e

    threads = [threading.Thread(target=go, args=(k, fn), daemon=True)
               for k, fn in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a pool call hung"
    return out


# -- two threads, one pool ------------------------------------------------------------------------

def test_sync_step_and_send_from_two_threads_never_step_an_env_twice() -> None:
    # The crash of the issue: send() could not see a running sync step.
    pool = make("Debug-v0", num_envs=4, num_threads=2, episode_length=0, step_sleep_us=20000.0)
    pool.reset()
    acts = np.zeros(4, dtype=np.int64)

    def step():
        return pool.step(acts)[0][:, 1].copy()

    def send_recv():
        pool.send(acts)
        return pool.recv()[0][:, 1].copy()

    results = both(step, send_recv)
    ok = [r for r in results if not isinstance(r, Exception)]
    errors = [r for r in results if isinstance(r, Exception)]
    assert len(ok) >= 1
    for e in errors:
        assert isinstance(e, (RuntimeError, ValueError)), e
        assert BUSY in str(e) or "in flight" in str(e), e
    obs, *_ = pool.step(acts)
    # Every env moved exactly once per successful call, plus this step.
    np.testing.assert_array_equal(obs[:, 1], np.full(4, len(ok) + 1))
    pool.close()


def _copied(result: tuple) -> tuple:
    *arrays, info = result
    return (*(np.array(a) for a in arrays), {k: np.array(v) for k, v in info.items()})


@pytest.mark.parametrize("autoreset", ["next_step", "same_step"])
@pytest.mark.parametrize("num_envs", [8, 7])
def test_sync_rows_shared_by_threads_match_envs_stepped_one_at_a_time(autoreset: str,
                                                                      num_envs: int) -> None:
    """A sync step split between threads (each writes its envs' rows to its own
    staging, then copies them into the batch) returns exactly the rows that
    stepping each env on its own (one env per call: no split) returns, in
    every field, through episode ends (max_episode_steps=4)."""
    kw = dict(num_envs=num_envs, num_threads=2, seed=3, autoreset=autoreset,
              max_episode_steps=4)
    rng = np.random.default_rng(0)
    with make("CartpoleSwingup-v1", **kw) as split, make("CartpoleSwingup-v1", **kw) as alone:
        split.reset()
        alone.reset()
        for _ in range(12):
            act = rng.uniform(-1, 1, size=(num_envs, 1)).astype(np.float32)
            obs, rew, term, trunc, info = split.step(act)
            # Copies: a sync result's buffers are reused two calls later.
            rows = [_copied(alone.step(act[i:i + 1], env_ids=[i])) for i in range(num_envs)]
            np.testing.assert_array_equal(obs, np.concatenate([r[0] for r in rows]))
            np.testing.assert_array_equal(rew, np.concatenate([r[1] for r in rows]))
            np.testing.assert_array_equal(term, np.concatenate([r[2] for r in rows]))
            np.testing.assert_array_equal(trunc, np.concatenate([r[3] for r in rows]))
            assert set(info) == set(rows[0][4])
            for key in info:
                np.testing.assert_array_equal(info[key],
                                              np.concatenate([r[4][key] for r in rows]), key)
            np.testing.assert_array_equal(info["env_id"], np.arange(num_envs))
        assert trunc.any() or (info["elapsed_step"] < 4).all()


def test_concurrent_recv_is_refused_not_queued() -> None:
    pool = make("Debug-v0", num_envs=2, num_threads=2, episode_length=0, step_sleep_us=200000.0)
    pool.async_reset()
    pool.recv()
    pool.send(np.zeros(2, dtype=np.int64))
    first, second = both(pool.recv, lambda: (time.sleep(0.05), pool.recv())[1])
    assert isinstance(first, tuple)
    assert isinstance(second, RuntimeError) and BUSY in str(second)
    pool.close()


def test_close_waits_for_a_sync_step_of_another_thread() -> None:
    pool = make("Debug-v0", num_envs=2, num_threads=2, episode_length=0, step_sleep_us=300000.0)
    pool.reset()
    t0 = time.monotonic()

    def closer():
        time.sleep(0.1)
        pool.close()
        return time.monotonic() - t0

    stepped, closed_after = both(lambda: pool.step(np.ones(2, dtype=np.int64))[0].copy(), closer)
    assert isinstance(stepped, np.ndarray), stepped
    np.testing.assert_array_equal(stepped[:, 1], [1, 1])  # a whole, valid result
    assert closed_after >= 0.25  # close() waited for the step instead of freeing the envs
    with pytest.raises(PoolClosedError):
        pool.step(np.ones(2, dtype=np.int64))


def test_close_while_another_thread_sends_inline_is_safe() -> None:
    # The use-after-free of the issue: close() freed envs an inline send was stepping.
    # glibc poisons freed memory (MALLOC_PERTURB_), so a use-after-free shows.
    out = run_script("""
        import threading, time
        import numpy as np
        from torchfrag.envs import make
        from torchfrag.envs.pool import PoolClosedError
        for trial in range(20):
            pool = make("Debug-v0", num_envs=64, num_threads=2, episode_length=0)
            pool.async_reset(); pool.recv()
            acts = np.zeros(64, dtype=np.int64)
            errors = []
            def loop():
                try:
                    while True:
                        pool.send(acts)
                        obs = pool.recv()[0]
                        assert (obs[:, 0] >= 0).all() and (obs[:, 0] < 64).all()
                except PoolClosedError:
                    pass
                except Exception as e:
                    errors.append(repr(e))
            t = threading.Thread(target=loop); t.start()
            time.sleep(0.002 * (trial % 5))
            pool.close()
            t.join(30)
            assert not t.is_alive(), "sender hung"
            assert not errors, errors
        print("ok")
    """, env={"MALLOC_PERTURB_": "165"})
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]


class TwoThreads(RuleBasedStateMachine):
    """Two Python threads drive one pool at once; a call either runs whole or is refused."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = make("Debug-v0", num_envs=4, batch_size=4, num_threads=2, episode_length=0,
                         step_sleep_us=1000.0)
        self.pool.reset()
        self.steps = 0  # successful steps (each moves every env once)
        self.acts = np.zeros(4, dtype=np.int64)

    def op(self, name: str):
        pool, acts = self.pool, self.acts

        def step():
            obs = pool.step(acts)[0]
            return ("step", obs[:, :2].copy())

        def send_recv():
            pool.send(acts)
            obs = pool.recv()[0]
            return ("step", obs[:, :2].copy())

        def seed():
            pool.seed(7)
            return ("seed", None)

        def in_flight():
            return ("in_flight", pool.in_flight)

        return {"step": step, "send_recv": send_recv, "seed": seed, "in_flight": in_flight}[name]

    @rule(a=st.sampled_from(["step", "send_recv", "seed", "in_flight"]),
          b=st.sampled_from(["step", "send_recv", "seed", "in_flight"]))
    def concurrently(self, a: str, b: str) -> None:
        for r in both(self.op(a), self.op(b)):
            if isinstance(r, Exception):
                # Refused as a whole: busy, or the other thread's envs are in flight.
                assert isinstance(r, (RuntimeError, ValueError)), repr(r)
                assert BUSY in str(r) or "in flight" in str(r), str(r)
            elif r[0] == "step":
                self.steps += 1
                obs = r[1]
                assert sorted(obs[:, 0].tolist()) == [0, 1, 2, 3]
                # Rows of one call are one consistent step of every env.
                assert (obs[:, 1] == self.steps).all() or (obs[:, 1] == obs[0, 1]).all()

    @invariant()
    def every_env_stepped_once_per_successful_call(self) -> None:
        assert self.pool.in_flight == 0
        obs = self.pool.step(self.acts)[0]
        self.steps += 1
        np.testing.assert_array_equal(obs[:, 1], np.full(4, self.steps))

    def teardown(self) -> None:
        self.pool.close()


TestTwoThreads = TwoThreads.TestCase
TestTwoThreads.settings = settings(max_examples=8, stateful_step_count=6, deadline=None,
                                   suppress_health_check=list(HealthCheck))


# -- fork -----------------------------------------------------------------------------------------

FORK_SETUP = """
    import gc, os, sys, time
    import numpy as np
    from torchfrag.envs import make
    from torchfrag.envs.pool import PoolClosedError
    a = make("CartPole-v1", num_envs=8, num_threads=2)
    a.reset()
    b = make("Debug-v0", num_envs=4, num_threads=2, step_sleep_us=2000.0)
    b.async_reset()   # results in flight at fork time
    def child_checks():
        for pool in (a, b):
            assert pool.closed and pool.in_flight == 0
            for call in (lambda: pool.step(np.zeros(pool.num_envs, dtype=np.int64)),
                         lambda: pool.send(np.zeros(pool.num_envs, dtype=np.int64)),
                         lambda: pool.recv(timeout=1.0), pool.reset):
                try:
                    call()
                except PoolClosedError as e:
                    assert "fork" in str(e), e
                else:
                    raise AssertionError("a parent's pool worked in the child")
        a.close(); b.close()     # no-ops here
        c = make("CartPole-v1", num_envs=2, num_threads=2)   # a new pool works
        c.reset(); c.step(np.zeros(2, dtype=np.int64)); c.close()
"""


def test_os_fork_child_cannot_use_the_parents_pool_and_exits_at_once() -> None:
    out = run_script(FORK_SETUP + """
    for mode in ("checks", "exit", "sys_exit"):
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                if mode == "checks":
                    child_checks()
            except BaseException as e:
                print("child failed:", repr(e), file=sys.stderr, flush=True)
                code = 3
            if mode == "sys_exit":
                sys.exit(code)   # full interpreter shutdown: the pools get destroyed
            os._exit(code)
        for _ in range(400):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            raise SystemExit(f"child ({mode}) hung")
        assert os.waitstatus_to_exitcode(status) == 0, (mode, status)
        print(mode, "child took", round(time.monotonic() - t0, 2), "s")
    # The parent's pools are untouched.
    print(b.recv()[0].shape); a.step(np.zeros(8, dtype=np.int64)); a.close(); b.close()
    print("ok")
    """)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr[-3000:]


def test_multiprocessing_fork_child_closes_the_parents_pools() -> None:
    # The segfault: close() in a multiprocessing fork child with two pools in the parent.
    out = run_script(FORK_SETUP + """
    import multiprocessing as mp

    def target():
        child_checks()

    if __name__ == "__main__":
        ctx = mp.get_context("fork")
        for _ in range(3):
            p = ctx.Process(target=target)
            p.start(); p.join(60)
            assert p.exitcode == 0, p.exitcode
        b.recv(); a.close(); b.close()
        print("ok")
    """)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr[-3000:]


# -- signals --------------------------------------------------------------------------------------

SIGNAL_SETUP = """
    import os, signal, threading, time
    import numpy as np
    from torchfrag.envs import make
    from torchfrag.envs.pool import PoolClosedError
    sent = []
    def ctrl_c(after):
        def go():
            time.sleep(after)
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=go, daemon=True).start()
    def latency():
        return time.monotonic() - sent[-1]
"""


@pytest.mark.parametrize("timeout", ["None", "3600", "float('inf')"])
def test_ctrl_c_interrupts_recv_and_the_pool_stays_usable(timeout: str) -> None:
    out = run_script(SIGNAL_SETUP + f"""
    pool = make("Debug-v0", num_envs=2, num_threads=2, episode_length=0, step_sleep_us=1.5e6)
    pool.async_reset(); pool.recv()
    pool.send(np.zeros(2, dtype=np.int64))
    ctrl_c(0.3)
    t0 = time.monotonic()
    try:
        pool.recv(timeout={timeout})
    except KeyboardInterrupt:
        print("latency", latency(), "elapsed", time.monotonic() - t0)
    else:
        raise SystemExit("recv was not interrupted")
    obs = pool.recv(timeout=30)[0]   # the same batch, still coming
    assert obs[:, 1].tolist() == [1, 1], obs
    pool.close(); print("ok")
    """)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr[-3000:]
    # 20 ms polling gives ~0.3 s; the env step would end the wait only after 1.5 s.
    assert float(out.stdout.split("elapsed")[1].split()[0]) < 1.2, out.stdout


def test_ctrl_c_interrupts_a_sync_step_and_closes_the_pool_clearly() -> None:
    out = run_script(SIGNAL_SETUP + """
    pool = make("Debug-v0", num_envs=2, num_threads=2, episode_length=0, step_sleep_us=1.0e6)
    pool.reset()
    pool.step(np.zeros(2, dtype=np.int64))   # measures the env: the caller only waits now
    ctrl_c(0.2)
    t0 = time.monotonic()
    try:
        pool.step(np.zeros(2, dtype=np.int64))
    except KeyboardInterrupt:
        print("latency", latency(), "elapsed", time.monotonic() - t0)
    else:
        raise SystemExit("step was not interrupted")
    assert pool.closed
    try:
        pool.step(np.zeros(2, dtype=np.int64))
    except PoolClosedError as e:
        assert "interrupted" in str(e), e
    else:
        raise SystemExit("pool usable after an interrupted step")
    pool.close(); print("ok")
    """)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr[-3000:]
    # Interrupted at ~0.2 s, long before the 1 s env step ends.
    assert float(out.stdout.split("elapsed")[1].split()[0]) < 0.8, out.stdout


def test_recv_with_an_infinite_or_huge_timeout_waits() -> None:
    pool = make("Debug-v0", num_envs=2, num_threads=2, episode_length=0, step_sleep_us=100000.0)
    pool.async_reset()
    pool.recv()
    for timeout in (float("inf"), 1e10, 1e300):
        pool.send(np.zeros(2, dtype=np.int64))
        obs = pool.recv(timeout=timeout)[0]
        assert obs.shape == (2, 4)
    pool.send(np.zeros(2, dtype=np.int64))
    with pytest.raises(TimeoutError, match="timed out after 0.01 s"):
        pool.recv(timeout=0.01)
    for bad, err, match in (("1", TypeError, "timeout must be a number of seconds or None, got '1'"),
                            (float("nan"), ValueError, "timeout must be >= 0"),
                            (-1, ValueError, "got -1")):
        with pytest.raises(err, match=match):
            pool.recv(timeout=bad)
    pool.close()


# -- failed construction --------------------------------------------------------------------------

def test_thread_creation_failure_raises_instead_of_hanging() -> None:
    out = run_script("""
    import resource
    from torchfrag.envs import make
    make("CartPole-v1", num_envs=2, num_threads=2).close()   # loads everything first
    with open("/proc/self/status") as f:
        vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize"))
    # Room for some thread stacks, not for 500 of them.
    resource.setrlimit(resource.RLIMIT_AS, (vm + 256 * 2**20, resource.RLIM_INFINITY))
    try:
        make("CartPole-v1", num_envs=500, num_threads=500)
    except (RuntimeError, MemoryError) as e:
        print("raised:", e)
    else:
        print("no failure (enough address space)")
    print("ok")
    """, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr[-3000:]
    assert "raised: could not start worker thread" in out.stdout, out.stdout


def test_env_constructor_throwing_on_a_worker_raises() -> None:
    t0 = time.monotonic()
    # Option values are range-checked before any env is built; fail_on_make fails in the
    # constructor of env 7 only, on its worker thread.
    with pytest.raises(ValueError, match="Debug-v0 env 7 was asked to fail in its constructor"):
        make("Debug-v0", num_envs=8, num_threads=4, fail_on_make=[0] * 7 + [1])
    assert time.monotonic() - t0 < 30
    make("Debug-v0", num_envs=8, num_threads=4).close()  # and the process is fine
