"""The pool behind Gymnasium's VectorEnv API and registry."""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import torchfrag.envs  # noqa: F401 - registers torchfrag/<EnvId>
from torchfrag.envs import list_envs, make_gymnasium


def test_make_vec_vector_entry_point() -> None:
    envs = gymnasium.make_vec("torchfrag/CartPole-v1", num_envs=8,
                              vectorization_mode="vector_entry_point")
    assert envs.num_envs == 8
    assert envs.single_observation_space == gymnasium.make("CartPole-v1").observation_space
    assert envs.single_action_space == gymnasium.spaces.Discrete(2)
    obs, info = envs.reset(seed=0)
    assert obs.shape == (8, 4) and envs.observation_space.contains(obs)
    obs2, *_ = envs.step(envs.action_space.sample())
    assert obs2.shape == (8, 4)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    envs.close()


def test_every_env_is_registered() -> None:
    for env_id in list_envs():
        assert f"torchfrag/{env_id}" in gymnasium.registry


def test_reset_seed_is_reproducible_and_obs_are_copies() -> None:
    envs = make_gymnasium("Pendulum-v1", num_envs=4)
    a, _ = envs.reset(seed=3)
    b, _ = envs.reset(seed=3)
    np.testing.assert_array_equal(a, b)
    c, _ = envs.reset(seed=4)
    assert not np.array_equal(a, c)
    kept = a.copy()
    for _ in range(3):
        envs.step(envs.action_space.sample())
    np.testing.assert_array_equal(a, kept)  # copy=True protects returned arrays


def test_infos_follow_vector_convention_and_same_step_final_obs() -> None:
    envs = make_gymnasium("CartPole-v1", num_envs=4, autoreset="same_step", seed=0)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    envs.reset(seed=0)
    saw_final = False
    for _ in range(200):
        obs, _, term, trunc, info = envs.step(np.ones(4, dtype=np.int64))
        assert info["_env_id"].all()
        np.testing.assert_array_equal(info["env_id"], np.arange(4))
        done = term | trunc
        if done.any():
            saw_final = True
            np.testing.assert_array_equal(info["_final_obs"], done)
            for i in np.flatnonzero(done):
                assert info["final_obs"][i].shape == (4,)
                assert abs(info["final_obs"][i][2]) > 0.2 or trunc[i]  # pole fell
                assert abs(obs[i][2]) <= 0.05  # the new episode's first obs
    assert saw_final


def test_matches_gymnasium_sync_vector_env_next_step_semantics() -> None:
    """After a terminal step, the next step resets with reward 0 (Gymnasium's NEXT_STEP)."""
    envs = make_gymnasium("CartPole-v1", num_envs=2, seed=0)
    envs.reset(seed=0)
    for _ in range(100):
        _, _, term, trunc, _ = envs.step(np.ones(2, dtype=np.int64))
        if (term | trunc).any():
            break
    done = term | trunc
    obs, reward, term2, trunc2, _ = envs.step(np.ones(2, dtype=np.int64))
    assert (reward[done] == 0.0).all()
    assert not term2[done].any()
    assert (np.abs(obs[done]) <= 0.05).all()


def test_single_env_make() -> None:
    env = gymnasium.make("torchfrag/Acrobot-v1")
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    for _ in range(500):
        obs, reward, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            break
    assert trunc or term  # TimeLimit(500) from the registry


def test_bad_input_through_adapter() -> None:
    envs = make_gymnasium("CartPole-v1", num_envs=2)
    envs.reset()
    with pytest.raises(ValueError, match="shape"):
        envs.step(np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="reset options"):
        envs.reset(options={"low": 0})
