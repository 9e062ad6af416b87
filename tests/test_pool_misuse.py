"""Bad input to the pool and its adapters: refused with a message naming the argument and value.

Each case used to be accepted as garbage or to fail with an unrelated message
(issue 15).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from torchfrag.envs import make


@pytest.fixture
def pool2():
    pool = make("CartPole-v1", num_envs=2, seed=0)
    yield pool
    pool.close()


# -- seeds ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed, err, match", [
    ("12", TypeError, r"seed must be an int .* got str '12'"),
    (b"12", TypeError, r"got bytes b'12'"),
    (1.5, TypeError, r"seed must be an int .* got float 1.5"),
    ([1.9, 2.9], TypeError, r"seeds must be ints .* got float 1.9"),
    ([1, True], TypeError, r"got bool True"),
    ([1, -1], ValueError, r"seeds must be in \[0, 2\*\*64\), got -1"),
    ([1, 2, 3], ValueError, "got 3 seeds for 2 envs"),
    (2**64, ValueError, r"seed must be in \[0, 2\*\*64\), got 18446744073709551616"),
])
def test_bad_seeds_are_refused(seed, err, match) -> None:
    with pytest.raises(err, match=match):
        make("CartPole-v1", num_envs=2, seed=seed)


@pytest.mark.parametrize("seed, got", [(True, "bool True"), (1.5, "float 1.5"), ("abc", "str 'abc'")])
def test_reseeding_refuses_what_make_refuses(pool2, seed, got) -> None:
    # PoolEnv.set_seed(True) seeded with 1; 1.5 and 'abc' failed inside SeedSequence / int().
    from torchfrag.envs import PoolEnv

    with pytest.raises(TypeError, match=rf"seed must be an int in \[0, 2\*\*64\).* got {got}"):
        make("CartPole-v1", num_envs=2, seed=seed)
    with pytest.raises(TypeError, match=rf"seed must be an int in \[0, 2\*\*64\).* got {got}"):
        pool2.seed(seed)
    env = PoolEnv("CartPole-v1", num_envs=2)
    try:
        with pytest.raises(TypeError, match=rf"seed must be an int in \[0, 2\*\*64\), got {got}"):
            env.set_seed(seed)
        assert env.set_seed(3) is not None and env.reset()["observation"].shape == (2, 4)
    finally:
        env.close()


def test_seed_sequences_of_numpy_ints_still_work(pool2) -> None:
    a = make("CartPole-v1", num_envs=2, seed=np.array([3, 4], dtype=np.uint64)).reset()[0]
    b = make("CartPole-v1", num_envs=2, seed=[3, 4]).reset()[0]
    np.testing.assert_array_equal(a, b)


def test_reset_with_seed_checks_env_ids(pool2) -> None:
    with pytest.raises(ValueError, match=r"env id 5 is out of range \[0, 2\)"):
        pool2.reset(env_ids=[5], seed=7)
    with pytest.raises(TypeError, match="env_ids must be a 1-D sequence of integers"):
        pool2.reset(env_ids=[0.5], seed=7)
    obs, _ = pool2.reset(env_ids=[1], seed=7)  # the good call still works
    assert obs.shape == (1, 4)


# -- options --------------------------------------------------------------------------------------

@pytest.mark.parametrize("env_id, options, match", [
    # Each of these used to build a pool (link_length_1=-1 stepped, step_sleep_us=1e300 slept
    # forever) or failed without the option's name (complex).
    ("Acrobot-v1", {"link_length_1": -1}, r"option 'link_length_1' must be in \(0, inf\), got -1"),
    ("Acrobot-v1", {"link_moi": [1.0, 0.0]}, r"option 'link_moi' must be in \(0, inf\), got 0"),
    ("Debug-v0", {"episode_length": -5}, r"option 'episode_length' must be in \[0, 2147483647\], got -5"),
    ("Debug-v0", {"step_sleep_us": 1e300}, r"option 'step_sleep_us' must be in \[0, 3600000000\], got 1"),
    ("Debug-v0", {"step_sleep_us": -1.0}, r"option 'step_sleep_us' must be in \[0, 3600000000\], got -1"),
    ("CartPole-v1", {"masspole": 0.0}, r"option 'masspole' must be in \(0, inf\), got 0"),
    ("Pendulum-v1", {"l": -2.0}, r"option 'l' must be in \(0, inf\), got -2"),
])
def test_option_out_of_its_range_is_refused(env_id, options, match) -> None:
    with pytest.raises(ValueError, match=match):
        make(env_id, num_envs=2, **options)


@pytest.mark.parametrize("value, got", [(1 + 2j, r"complex \(1\+2j\)"), (np.array([1j, 2j]), "ndarray"),
                                        (np.datetime64("2020-01-01"), "datetime64")])
def test_complex_and_other_non_real_option_values_are_refused(value, got) -> None:
    with pytest.raises(TypeError, match=rf"option 'gravity' must be a real number, a string, or a 1-D "
                                        rf"sequence of real numbers \(one per env\); got {got}"):
        make("CartPole-v1", num_envs=2, gravity=value)


def test_uint64_ids_and_actions_do_not_wrap_to_negative(pool2) -> None:
    # 2**64 - 1 used to arrive as -1 ("env id -1 is out of range").
    big = np.array([2**64 - 1, 0], dtype=np.uint64)
    pool2.reset()
    with pytest.raises(ValueError, match=r"action 18446744073709551615 is out of range \[0, 2\)"):
        pool2.step(big)
    with pytest.raises(ValueError, match=r"action 9223372036854775808 is out of range"):
        pool2.step(np.array([2**63, 0], dtype=np.uint64))
    with pytest.raises(ValueError, match=r"env id 18446744073709551615 is out of range \[0, num_envs\)"):
        pool2.step(np.zeros(2, dtype=np.int64), big[::-1].copy())
    with pytest.raises(ValueError, match=r"env id 18446744073709551615 is out of range"):
        pool2.send(np.zeros(2, dtype=np.int64), big)
    assert pool2.in_flight == 0
    ok = pool2.step(np.zeros(2, dtype=np.uint64), np.array([1, 0], dtype=np.uint64))  # in range: fine
    assert ok[0].shape == (2, 4)


@pytest.mark.parametrize("env_id, options, match", [
    ("CartPole-v1", {"length": float("inf")}, "'length' must be a finite number, got inf"),
    ("MountainCar-v0", {"force": float("inf")}, "'force' must be a finite number, got inf"),
    ("Acrobot-v1", {"torque_noise_max": float("inf")}, "'torque_noise_max' must be a finite"),
    ("Pendulum-v1", {"x_init": float("-inf")}, "'x_init' must be a finite number, got -inf"),
    ("CartPole-v1", {"kinematics_integrator": 5},
     "'kinematics_integrator' expects a string, got the number 5"),
    ("CartPole-v1", {"gravity": "high"}, "'gravity' expects a number, got the string 'high'"),
    ("CartPole-v1", {"max_episode_steps": 1e300},
     r"'max_episode_steps' expects an integer in \[-2147483647, 2147483647\], got 1.0000"),
    ("CartPole-v1", {"max_episode_steps": -3}, r"max_episode_steps must be >= 0 .*got -3"),
])
def test_bad_option_values_are_refused(env_id, options, match) -> None:
    from torchfrag.envs import list_envs

    if env_id not in list_envs():
        pytest.skip(f"{env_id} not built")
    with pytest.raises(ValueError, match=match):
        make(env_id, num_envs=2, **options)


def test_inf_physical_option_used_to_give_nan_observations() -> None:
    # The garbage the refusal prevents: a finite huge value still works.
    pool = make("CartPole-v1", num_envs=1, length=1e6)
    pool.reset()
    assert np.isfinite(pool.step(np.zeros(1, dtype=np.int64))[0]).all()


def test_too_many_envs_refused_at_once() -> None:
    with pytest.raises(ValueError, match=r"num_envs must be at most 4194304, got 1000000000000"):
        make("CartPole-v1", num_envs=10**12)
    with pytest.raises(TypeError, match="num_envs must be an int, got float"):
        make("CartPole-v1", num_envs=1e12)


# -- actions --------------------------------------------------------------------------------------

def test_torch_actions_with_grad_or_bfloat16() -> None:
    pool = make("Pendulum-v1", num_envs=2, seed=0)
    pool.reset()
    ref = make("Pendulum-v1", num_envs=2, seed=0)
    ref.reset()
    act = torch.full((2, 1), 0.5, requires_grad=True)
    np.testing.assert_array_equal(pool.step(act * 1.0)[0], ref.step(np.full((2, 1), 0.5))[0])
    bf = torch.full((2, 1), 0.5, dtype=torch.bfloat16)  # 0.5 is exact in bfloat16
    np.testing.assert_array_equal(pool.step(bf)[0], ref.step(np.full((2, 1), 0.5))[0])
    d = make("CartPole-v1", num_envs=2)
    d.reset()
    with pytest.raises(TypeError, match="discrete actions must be integers, got dtype float32"):
        d.step(torch.zeros(2, dtype=torch.bfloat16))
    d.step(torch.ones(2, dtype=torch.int64, device="cpu"))


def test_nan_discrete_action_is_refused(pool2) -> None:
    pool2.reset()
    with pytest.raises(TypeError, match="discrete actions must be integers, got dtype float64"):
        pool2.step(np.array([np.nan, 0.0]))
    with pytest.raises(TypeError, match="discrete actions must be integers"):
        pool2.step(torch.tensor([float("nan"), 0.0]))


# -- collector ------------------------------------------------------------------------------------

def test_collector_refuses_float_discrete_actions_of_any_shape() -> None:
    from torchfrag.collectors import PoolCollector

    for shape in ((-1,), (-1, 1)):
        c = PoolCollector("CartPole-v1", lambda obs, s=shape: torch.full(
            (obs.shape[0], 1), 1.9).reshape(s), num_envs=4, frames_per_batch=40,
            total_frames=40)
        with pytest.raises(TypeError, match="discrete actions must be integers, got dtype float32"):
            list(c)
        c.shutdown()


@pytest.mark.parametrize("n", [0, -2])
def test_collector_num_envs_must_be_positive(n: int) -> None:
    from torchfrag.collectors import PoolCollector

    with pytest.raises(ValueError, match=f"num_envs must be a positive integer, got {n}"):
        PoolCollector("CartPole-v1", None, num_envs=n, frames_per_batch=40)


# -- Gymnasium single env -------------------------------------------------------------------------

def test_gymnasium_single_env_refuses_non_integer_actions_and_reset_options() -> None:
    import gymnasium

    import torchfrag.envs  # noqa: F401 - registers torchfrag/<EnvId>

    env = gymnasium.make("torchfrag/CartPole-v1", disable_env_checker=True)
    env.reset(seed=0)
    for bad in (1.7, "1", np.array([1]), True):
        with pytest.raises(TypeError, match="a discrete action must be one integer in"):
            env.step(bad)
    env.step(1)
    env.step(np.int64(0))
    env.step(np.array(1))
    with pytest.raises(ValueError, match="reset options are not supported"):
        env.reset(options={"low": -0.1})
    env.close()


# -- TorchRL env ----------------------------------------------------------------------------------

def test_torchrl_env_info_keys_string_and_empty_rollout() -> None:
    from torchfrag.envs import PoolEnv

    with pytest.raises(TypeError, match="info_keys must be a sequence of info names, got the "
                                        "string 'elapsed_step'"):
        PoolEnv("CartPole-v1", num_envs=2, info_keys="elapsed_step")
    env = PoolEnv("CartPole-v1", num_envs=2, info_keys=["elapsed_step"])
    for n in (0, -1):
        with pytest.raises(ValueError, match=f"max_steps must be a positive integer, got {n}"):
            env.rollout(n)
    assert env.rollout(1)["next", "done"].shape == (2, 1, 1)
    env.close()
