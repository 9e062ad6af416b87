"""Classic-control envs against Gymnasium, step for step.

After each reset the reference env's internal state is set to ours (our
``info["state"]``), then both are stepped with the same random actions to the
end of the episode, over several episodes.
"""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from torchfrag.envs import make

ENV_IDS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]


def _sync_reference(ref: gymnasium.Env, env_id: str, state: np.ndarray) -> None:
    """Puts our float64 state into the reference env (already reset)."""
    inner = ref.unwrapped
    if env_id == "MountainCar-v0":
        # Gymnasium keeps a (position, velocity) tuple of NumPy float64 after steps.
        inner.state = np.array(state, dtype=np.float64)
    else:
        inner.state = np.array(state, dtype=np.float64)


def _random_actions(space: gymnasium.Space, rng: np.random.Generator, n: int) -> np.ndarray:
    if isinstance(space, gymnasium.spaces.Discrete):
        return rng.integers(0, space.n, size=n)
    # Include out-of-bounds actions: both sides must clip them the same way.
    return rng.uniform(-1.5 * space.high, 1.5 * space.high, size=(n, *space.shape)).astype(
        np.float32)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_matches_gymnasium(env_id: str) -> None:
    rng = np.random.default_rng(0)
    num_envs = 3
    episodes_per_env = 2
    pool = make(env_id, num_envs=num_envs, seed=7)
    refs = [gymnasium.make(env_id) for _ in range(num_envs)]
    obs, info = pool.reset()
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
        _sync_reference(ref, env_id, info["state"][i])
        ref_obs = ref.unwrapped._get_obs() if env_id == "Pendulum-v1" else None
        if ref_obs is not None:
            np.testing.assert_allclose(obs[i], ref_obs, atol=1e-6)
    finished = np.zeros(num_envs, dtype=int)
    steps = 0
    while (finished < episodes_per_env).any():
        actions = _random_actions(pool.action_space, rng, num_envs)
        obs, reward, terminated, truncated, info = pool.step(actions)
        steps += 1
        for i, ref in enumerate(refs):
            if finished[i] >= episodes_per_env:
                continue
            a = int(actions[i]) if actions.ndim == 1 else actions[i]
            r_obs, r_rew, r_term, r_trunc, _ = ref.step(a)
            np.testing.assert_allclose(obs[i], r_obs, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{env_id} env {i} step {steps}")
            assert reward[i] == pytest.approx(r_rew, rel=1e-9, abs=1e-9), (env_id, i, steps)
            assert bool(terminated[i]) == r_term, (env_id, i, steps)
            assert bool(truncated[i]) == r_trunc, (env_id, i, steps)
        done = terminated | truncated
        if done.any():
            finished += done
            ids = np.flatnonzero(done)
            # next_step auto-reset: the next step() would reset these envs; reset
            # them explicitly instead so both sides start the new episode together.
            r_obs, r_info = pool.reset(ids)
            for row, i in enumerate(ids):
                refs[i].reset()
                _sync_reference(refs[i], env_id, r_info["state"][row])
    assert steps > 10


def test_episode_lengths_are_gymnasiums() -> None:
    for env_id, limit in [("CartPole-v1", 500), ("Acrobot-v1", 500), ("MountainCar-v0", 200),
                          ("MountainCarContinuous-v0", 999), ("Pendulum-v1", 200)]:
        pool = make(env_id, num_envs=1)
        assert pool.spec.max_episode_steps == limit == gymnasium.spec(env_id).max_episode_steps
        assert pool.observation_space == gymnasium.spec(env_id).make().observation_space


def test_pendulum_truncates_at_limit() -> None:
    pool = make("Pendulum-v1", num_envs=2, max_episode_steps=5)
    pool.reset()
    for t in range(1, 6):
        _, _, terminated, truncated, info = pool.step(np.zeros((2, 1), dtype=np.float32))
        assert not terminated.any()
        assert truncated.all() == (t == 5)
        assert (info["elapsed_step"] == t).all()


def test_per_env_physical_parameters() -> None:
    """One value per env (domain randomisation) changes each env's dynamics."""
    pool = make("Pendulum-v1", num_envs=3, g=[0.0, 10.0, 10.0], m=[1.0, 1.0, 2.0], seed=3)
    obs, info = pool.reset()
    state = info["state"].copy()
    # Put every env in the same state through per-env seeds: compare dynamics
    # against Gymnasium envs built with the same parameters instead.
    for i, (g, m) in enumerate([(0.0, 1.0), (10.0, 1.0), (10.0, 2.0)]):
        ref = gymnasium.make("Pendulum-v1", g=g).unwrapped
        ref.m = m
        ref.reset(seed=0)
        ref.state = state[i].copy()
        actions = np.full((3, 1), 1.5, dtype=np.float32)
        r_obs, r_rew, *_ = ref.step(actions[i])
        obs, reward, *_ = pool.step(actions) if i == 0 else (obs, reward)
        np.testing.assert_allclose(obs[i], r_obs, atol=1e-6)
        assert reward[i] == pytest.approx(r_rew)
    with pytest.raises(ValueError, match="per-env values for 3 envs"):
        make("Pendulum-v1", num_envs=3, g=[1.0, 2.0])
    with pytest.raises(ValueError, match="not a per-env option"):
        make("Pendulum-v1", num_envs=2, x_init=[1.0, 2.0])


def test_cartpole_options_match_gymnasium_attributes() -> None:
    pool = make("CartPole-v1", num_envs=1, gravity=3.0, length=0.8, force_mag=5.0,
                kinematics_integrator="semi-implicit")
    ref = gymnasium.make("CartPole-v1").unwrapped
    ref.gravity, ref.length, ref.force_mag = 3.0, 0.8, 5.0
    ref.polemass_length = ref.masspole * ref.length
    ref.kinematics_integrator = "semi-implicit"
    obs, info = pool.reset()
    ref.reset(seed=0)
    ref.state = info["state"][0].copy()
    for a in [0, 1, 1, 0, 1, 1, 1, 0]:
        obs, *_ = pool.step(np.array([a]))
        r_obs, *_ = ref.step(a)
        np.testing.assert_allclose(obs[0], r_obs, atol=1e-6)
    with pytest.raises(ValueError, match="kinematics_integrator"):
        make("CartPole-v1", kinematics_integrator="rk4")
