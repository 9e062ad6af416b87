"""The pool core: determinism, async semantics, auto-reset, errors, bad input, stress."""
from __future__ import annotations

import gc
import os
import threading

import numpy as np
import psutil
import pytest

from torchfrag.envs import EnvError, PoolClosedError, make


def _policy(env_ids: np.ndarray, t: np.ndarray, n: int) -> np.ndarray:
    """Actions that depend only on (env, step): identical whatever the arrival order."""
    return ((env_ids * 7919 + t * 104729) // 3 % n).astype(np.int64)


def _sync_trajectories(num_threads: int, seed: int, steps: int = 300) -> np.ndarray:
    pool = make("CartPole-v1", num_envs=8, num_threads=num_threads, seed=seed)
    obs, _ = pool.reset()
    out = [obs.copy()]
    ids = np.arange(8)
    for t in range(steps):
        obs, *_ = pool.step(_policy(ids, np.full(8, t), 2))
        out.append(obs.copy())
    pool.close()
    return np.stack(out, axis=1)  # [env, time, obs]


def _async_trajectories(seed: int, steps: int = 300, batch_size: int = 3) -> np.ndarray:
    pool = make("CartPole-v1", num_envs=8, batch_size=batch_size, num_threads=2, seed=seed)
    per_env: list[list[np.ndarray]] = [[] for _ in range(8)]
    pool.async_reset()
    while min(len(p) for p in per_env) <= steps:
        obs, _, _, _, info = pool.recv()
        ids = info["env_id"].astype(np.int64)
        for row, i in enumerate(ids):
            per_env[i].append(obs[row].copy())
        t = np.array([len(per_env[i]) for i in ids]) - 1  # actions taken so far
        pool.send(_policy(ids, t, 2), ids)
    pool.close()
    return np.stack([np.stack(p[: steps + 1]) for p in per_env])


def test_determinism_across_threads_and_modes() -> None:
    one = _sync_trajectories(num_threads=1, seed=3)
    two = _sync_trajectories(num_threads=2, seed=3)
    np.testing.assert_array_equal(one, two)
    asynchronous = _async_trajectories(seed=3)
    np.testing.assert_array_equal(one, asynchronous)
    other = _sync_trajectories(num_threads=2, seed=4)
    assert not np.array_equal(one[:, 0], other[:, 0])


def test_explicit_seed_list_and_reseed() -> None:
    a = make("Pendulum-v1", num_envs=3, seed=[5, 6, 5])
    obs, _ = a.reset()
    np.testing.assert_array_equal(obs[0], obs[2])
    assert not np.array_equal(obs[0], obs[1])
    first = obs.copy()
    obs, _ = a.reset(seed=[5, 6, 5])
    np.testing.assert_array_equal(obs, first)
    b = make("Pendulum-v1", num_envs=3, seed=11)
    obs_b, _ = b.reset()
    obs_b = obs_b.copy()
    obs_b2, _ = b.reset(seed=11)
    np.testing.assert_array_equal(obs_b, obs_b2)


def test_async_returns_each_env_once_per_send() -> None:
    pool = make("Debug-v0", num_envs=10, batch_size=4, num_threads=2, episode_length=0)
    pool.async_reset()
    seen: list[int] = []
    for _ in range(2):
        _, _, _, _, info = pool.recv()
        seen.extend(info["env_id"].tolist())
    assert pool.in_flight == 2
    assert len(set(seen)) == 8
    # The last two need company to fill a batch of 4.
    pool.send(np.ones(2, dtype=np.int64), seen[:2])
    _, _, _, _, info = pool.recv()
    seen.extend(info["env_id"].tolist())
    assert sorted(seen) == sorted(list(range(10)) + seen[:2])
    assert pool.in_flight == 0


def test_async_obs_routing_and_next_step_autoreset() -> None:
    pool = make("Debug-v0", num_envs=4, batch_size=2, episode_length=3)
    pool.async_reset()
    steps = np.zeros(4, dtype=int)
    for _ in range(40):
        obs, reward, terminated, truncated, info = pool.recv()
        ids = info["env_id"]
        np.testing.assert_array_equal(obs[:, 0], ids)  # obs[0] is the env index
        for row, i in enumerate(ids):
            # next_step: step 0 (reset), 1, 2, 3 (terminated), then reset again.
            assert obs[row, 1] == steps[i] % 4
            assert terminated[row] == (steps[i] % 4 == 3)
            steps[i] += 1
        pool.send(ids.astype(np.int64) % 2, ids)


def test_same_step_autoreset_returns_final_obs() -> None:
    pool = make("Debug-v0", num_envs=2, episode_length=3, autoreset="same_step")
    obs, info = pool.reset()
    np.testing.assert_array_equal(info["final_obs"], obs)
    for t in range(1, 7):
        obs, reward, terminated, truncated, info = pool.step(np.ones(2, dtype=np.int64))
        done = t % 3 == 0
        assert terminated.all() == done
        assert (info["final_obs"][:, 1] == (3 if done else t % 3)).all()
        assert (obs[:, 1] == (0 if done else t % 3)).all()  # new episode starts at 0
        assert (obs[:, 3] == 1 + t // 3).all()  # episode counter


def test_same_step_matches_next_step_data() -> None:
    """Same-step data is next-step data without the extra reset transitions."""
    a = make("CartPole-v1", num_envs=4, seed=1, autoreset="same_step")
    b = make("CartPole-v1", num_envs=4, seed=1, autoreset="next_step")
    oa, _ = a.reset()
    ob, _ = b.reset()
    np.testing.assert_array_equal(oa, ob)
    rng = np.random.default_rng(0)
    for _ in range(200):
        act = rng.integers(0, 2, 4)
        oa, ra, ta, tra, ia = a.step(act)
        ob, rb, tb, trb, ib = b.step(act)
        np.testing.assert_array_equal(ia["final_obs"], ob)
        np.testing.assert_array_equal(ra, rb)
        done = tb | trb
        if done.any():
            ids = np.flatnonzero(done)
            ob2, _ = b.reset(ids)
            np.testing.assert_array_equal(oa[ids], ob2)


def test_recv_errors_and_timeout() -> None:
    pool = make("Debug-v0", num_envs=4, batch_size=2, step_sleep_us=300_000)
    with pytest.raises(RuntimeError, match="no envs in flight"):
        pool.recv()
    pool.async_reset()
    pool.recv()
    pool.recv()
    pool.send(np.zeros(1, dtype=np.int64), [0])
    with pytest.raises(RuntimeError, match="only 1 envs are in flight"):
        pool.recv()
    pool.send(np.zeros(1, dtype=np.int64), [1])
    with pytest.raises(TimeoutError, match="timed out"):
        pool.recv(timeout=0.01)
    obs, *_ = pool.recv(timeout=5.0)  # still arrives after the timeout
    assert sorted(obs[:, 0].tolist()) == [0.0, 1.0]
    with pytest.raises(ValueError, match="timeout"):
        pool.recv(timeout=-1)


def test_env_exception_is_raised_and_pool_recovers() -> None:
    pool = make("Debug-v0", num_envs=3, fail_on_step=[0, 2, 0], episode_length=0)
    pool.reset()
    pool.step(np.zeros(3, dtype=np.int64))
    with pytest.raises(EnvError, match="env 1 raised: Debug-v0 was asked to fail on step 2") as err:
        pool.step(np.zeros(3, dtype=np.int64))
    assert err.value.env_ids == [1]
    with pytest.raises(ValueError, match="env 1 raised in an earlier step; reset it"):
        pool.step(np.zeros(3, dtype=np.int64))
    # The other envs keep working; env 1 works again after a reset.
    obs, *_ = pool.step(np.zeros(2, dtype=np.int64), env_ids=[0, 2])
    assert obs[:, 1].tolist() == [3.0, 3.0]
    pool.reset([1])
    obs, *_ = pool.step(np.zeros(3, dtype=np.int64))
    assert obs[:, 1].tolist() == [4.0, 1.0, 4.0]


def test_env_exception_in_async_mode() -> None:
    pool = make("Debug-v0", num_envs=4, batch_size=2, fail_on_step=[0, 0, 1, 0])
    pool.async_reset()
    pool.recv()
    pool.recv()
    pool.send(np.zeros(4, dtype=np.int64))
    errors = 0
    for _ in range(2):
        try:
            pool.recv(timeout=5)
        except EnvError as e:
            errors += 1
            assert e.env_ids == [2]
            assert 2 in e.batch_env_ids and len(e.batch_env_ids) == 2
    assert errors == 1
    assert pool.in_flight == 0
    with pytest.raises(ValueError, match="reset it before"):
        pool.send(np.zeros(1, dtype=np.int64), [2])
    pool.async_reset([2, 3])
    obs, *_ = pool.recv(timeout=5)
    assert sorted(obs[:, 0].tolist()) == [2.0, 3.0]


def test_reset_failure_is_reported() -> None:
    with pytest.raises(EnvError, match="fail on reset"):
        make("Debug-v0", num_envs=2, fail_on_reset=True).reset()


@pytest.mark.parametrize(
    "actions, exc, match",
    [
        (np.zeros(3, dtype=np.int64), ValueError, r"shape \(4,\), got \(3,\)"),
        (np.zeros((4, 2), dtype=np.int64), ValueError, "shape"),
        (np.zeros(4, dtype=np.float32), TypeError, "must be integers, got dtype float32"),
        (np.array(["a"] * 4), TypeError, "integers"),
        (np.array([0, 1, 2, 0]), ValueError, "action 2 for env 2 is out of range"),
        (np.array([0, -1, 0, 0]), ValueError, "out of range"),
        (np.zeros(4, dtype=bool), TypeError, "integers"),
    ],
)
def test_bad_discrete_actions(actions, exc, match) -> None:
    pool = make("CartPole-v1", num_envs=4)
    pool.reset()
    with pytest.raises(exc, match=match):
        pool.step(actions)
    with pytest.raises(exc, match=match):
        pool.send(actions)
    assert pool.in_flight == 0
    obs, *_ = pool.step(np.zeros(4, dtype=np.int64))  # still usable
    assert obs.shape == (4, 4)


@pytest.mark.parametrize(
    "actions, exc, match",
    [
        (np.array([[np.nan], [0.0]], dtype=np.float32), ValueError, "not finite"),
        (np.array([[np.inf], [0.0]]), ValueError, "not finite"),
        (np.zeros(2, dtype=np.float32), ValueError, r"shape \(2, 1\)"),
        (np.zeros((2, 1), dtype=np.complex64), TypeError, "floating point"),
        (np.array([[1e300], [0.0]]), ValueError, "out of the float32 range"),
    ],
)
def test_bad_continuous_actions(actions, exc, match) -> None:
    pool = make("Pendulum-v1", num_envs=2)
    pool.reset()
    with pytest.raises(exc, match=match):
        pool.step(actions)
    obs, *_ = pool.step(np.full((2, 1), 1e30))  # huge values are clipped, as in Gymnasium
    assert np.isfinite(obs).all()


def test_bad_construction_and_ids() -> None:
    with pytest.raises(ValueError, match="num_envs must be a positive integer"):
        make("CartPole-v1", num_envs=0)
    with pytest.raises(ValueError, match="num_envs must be a positive integer"):
        make("CartPole-v1", num_envs=-3)
    with pytest.raises(ValueError, match=r"batch_size must be in \[1, num_envs=4\]"):
        make("CartPole-v1", num_envs=4, batch_size=5)
    with pytest.raises(ValueError, match="unknown env id 'Nope-v0'; registered ids are: .*CartPole-v1"):
        make("Nope-v0")
    with pytest.raises(ValueError, match="unknown option 'gravityy'; valid options are: gravity"):
        make("CartPole-v1", gravityy=1.0)
    with pytest.raises(ValueError, match="autoreset"):
        make("CartPole-v1", autoreset="sometimes")
    with pytest.raises(TypeError, match="num_envs must be an int"):
        make("CartPole-v1", num_envs=2.5)
    with pytest.raises(ValueError, match="seed"):
        make("CartPole-v1", seed=-1)
    with pytest.raises(ValueError, match="expects an integer"):
        make("CartPole-v1", max_episode_steps=1.5)
    pool = make("CartPole-v1", num_envs=4)
    with pytest.raises(ValueError, match="has not been reset"):
        pool.step(np.zeros(4, dtype=np.int64))
    pool.reset()
    with pytest.raises(ValueError, match="env id 9 is out of range"):
        pool.send(np.zeros(1, dtype=np.int64), [9])
    with pytest.raises(ValueError, match="appears twice"):
        pool.send(np.zeros(2, dtype=np.int64), [1, 1])
    with pytest.raises(TypeError, match="env_ids must be integers"):
        pool.send(np.zeros(1, dtype=np.int64), [1.5])
    pool.send(np.zeros(2, dtype=np.int64), [0, 1])
    with pytest.raises(ValueError, match="env 1 is already in flight"):
        pool.send(np.zeros(1, dtype=np.int64), [1])
    with pytest.raises(RuntimeError, match="in flight"):
        pool.step(np.zeros(4, dtype=np.int64))
    assert pool.in_flight == 2
    pool.close()
    for call in (lambda: pool.step(np.zeros(4, dtype=np.int64)), pool.reset, pool.recv,
                 lambda: pool.send(np.zeros(4, dtype=np.int64))):
        with pytest.raises(PoolClosedError, match="closed"):
            call()
    pool.close()  # idempotent


def test_returned_views_survive_close_and_gc() -> None:
    pool = make("CartPole-v1", num_envs=4)
    obs, _ = pool.reset()
    expected = obs.copy()
    pool.close()
    del pool
    gc.collect()
    np.testing.assert_array_equal(obs, expected)


def test_close_while_envs_in_flight_does_not_hang() -> None:
    pool = make("Debug-v0", num_envs=8, batch_size=2, num_threads=2, step_sleep_us=20_000)
    pool.async_reset()
    pool.recv()
    pool.send(np.zeros(2, dtype=np.int64), pool.recv()[4]["env_id"])
    waiter_error: list[BaseException] = []

    def wait() -> None:
        try:
            while True:
                pool.recv(timeout=10)
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            waiter_error.append(e)

    t = threading.Thread(target=wait)
    t.start()
    pool.close()
    t.join(timeout=10)
    assert not t.is_alive()
    assert waiter_error and isinstance(waiter_error[0], (PoolClosedError, RuntimeError))


def _rss_mb() -> float:
    return psutil.Process(os.getpid()).memory_info().rss / 2**20


def test_create_step_close_cycles_do_not_leak() -> None:
    def cycle() -> None:
        pool = make("CartPole-v1", num_envs=16, num_threads=2, seed=1)
        pool.reset()
        for _ in range(5):
            pool.step(np.ones(16, dtype=np.int64))
        pool.close()

    for _ in range(100):  # warm up allocator pools
        cycle()
    gc.collect()
    before = _rss_mb()
    threads_before = threading.active_count()
    os_threads_before = psutil.Process().num_threads()
    for _ in range(1000):
        cycle()
    gc.collect()
    growth = _rss_mb() - before
    assert growth < 5.0, f"RSS grew by {growth:.1f} MB over 1000 cycles"
    assert threading.active_count() == threads_before
    assert psutil.Process().num_threads() == os_threads_before  # every worker joined


def test_100k_async_steps_random_batches_no_lost_or_duplicated_ids() -> None:
    rng = np.random.default_rng(0)
    n, bs = 16, 4
    pool = make("CartPole-v1", num_envs=n, batch_size=bs, num_threads=2)
    pool.async_reset()
    idle: list[int] = []
    sent = np.zeros(n, dtype=np.int64)
    received = np.zeros(n, dtype=np.int64)
    sent += 1  # the async reset
    steps = 0
    while steps < 100_000:
        _, _, _, _, info = pool.recv()
        ids = info["env_id"].tolist()
        assert len(set(ids)) == bs
        for i in ids:
            received[i] += 1
            assert received[i] == sent[i]  # every send answered exactly once
        idle.extend(ids)
        steps += bs
        # Send a random number of the idle envs (at least enough to refill a batch).
        k = int(rng.integers(max(1, bs - pool.in_flight), len(idle) + 1))
        rng.shuffle(idle)
        chosen, idle = idle[:k], idle[k:]
        sent[chosen] += 1
        pool.send(rng.integers(0, 2, len(chosen)), chosen)
    assert pool.in_flight == int((sent - received).sum())
    pool.close()


def test_option_values_inf_nan_and_gymnasium_ranges() -> None:
    from torchfrag.envs import list_envs

    if "Hopper-v5" in list_envs():  # the bound of a range may be infinite (Gymnasium's default)
        pool = make("Hopper-v5", num_envs=1, healthy_z_max=float("inf"))
        assert pool.options["healthy_z_max"] == float("inf")
        pool.close()
    # A physical parameter may not: it would only give NaN observations.
    with pytest.raises(ValueError, match="'reset_high' must be a finite number, got inf"):
        make("CartPole-v1", num_envs=1, reset_high=float("inf"), reset_low=0.0)
    with pytest.raises(ValueError, match="'gravity' must be a finite number, got nan"):
        make("CartPole-v1", gravity=float("nan"))
    with pytest.raises(ValueError, match="'max_episode_steps' must be a finite number, got inf"):
        make("CartPole-v1", max_episode_steps=float("inf"))
    with pytest.raises(TypeError, match=r"option 'gravity' must be a real number, a string, "
                                        r"or a 1-D sequence .* got dict"):
        make("CartPole-v1", gravity={"a": 1})


def test_range_options_split_into_min_max() -> None:
    from torchfrag.envs import list_envs
    from torchfrag.envs.pool import normalize_options

    assert normalize_options("CartPole-v1", {"gravity": 1.0}) == {"gravity": 1.0}
    if "Hopper-v5" in list_envs():
        opts = normalize_options("Hopper-v5", {"healthy_z_range": (0.5, float("inf"))})
        assert opts == {"healthy_z_min": 0.5, "healthy_z_max": float("inf")}
        with pytest.raises(ValueError, match="expects a \\(low, high\\) pair"):
            normalize_options("Hopper-v5", {"healthy_z_range": 3.0})


def test_recv_returns_envs_in_finish_order() -> None:
    # Env 0 is slow; the first batch must be made of envs that finished first.
    pool = make("Debug-v0", num_envs=4, batch_size=2, num_threads=2, episode_length=0,
                step_sleep_us=[300_000, 0, 0, 0])
    pool.async_reset()
    pool.recv(timeout=10)
    pool.recv(timeout=10)
    pool.send(np.zeros(4, dtype=np.int64))
    *_, info = pool.recv(timeout=10)
    assert 0 not in info["env_id"].tolist()
    *_, info = pool.recv(timeout=10)
    assert 0 in info["env_id"].tolist()


def test_same_step_keeps_final_infos() -> None:
    pool = make("Debug-v0", num_envs=2, episode_length=2, autoreset="same_step")
    obs, info = pool.reset()
    np.testing.assert_array_equal(info["final_episode"], info["episode"])
    pool.step(np.zeros(2, dtype=np.int64))
    obs, _, terminated, _, info = pool.step(np.zeros(2, dtype=np.int64))
    assert terminated.all()
    assert info["final_episode"].tolist() == [1, 1]  # the episode that just ended
    assert info["episode"].tolist() == [2, 2]  # the new one, after the same-step reset
