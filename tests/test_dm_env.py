"""The pool's dm_env face (``make_dm``), against dm_env's rules and EnvPool's ``make_dm``.

EnvPool's dm face is the reference for the conventions (batched ``TimeStep``
fields, ``observation.obs``/``observation.env_id``, FIRST after LAST with
reward 0 and discount 1, discount 0 on termination and 1 on truncation);
the trajectories themselves are checked against our own raw pool.
"""
from __future__ import annotations

import numpy as np
import pytest

dm_env = pytest.importorskip("dm_env")

from torchfrag.envs import make, make_dm  # noqa: E402


def _grammar(step_types: np.ndarray) -> None:
    """Each env's step types read FIRST MID* LAST FIRST ... (a LAST is always followed by FIRST)."""
    for col in step_types.T:
        for prev, cur in zip(col[:-1], col[1:]):
            if prev == dm_env.StepType.LAST:
                assert cur == dm_env.StepType.FIRST
            else:
                assert cur != dm_env.StepType.FIRST


def test_time_steps_follow_the_pool_and_dm_env_rules() -> None:
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 2, size=3) for _ in range(120)]
    env = make_dm("CartPole-v1", num_envs=3, seed=7, max_episode_steps=25)
    pool = make("CartPole-v1", num_envs=3, seed=7, max_episode_steps=25)
    ts = env.reset()
    obs, _ = pool.reset()
    assert (ts.step_type == dm_env.StepType.FIRST).all() and (ts.reward == 0).all()
    np.testing.assert_array_equal(ts.observation.obs, obs)
    types, seen_term, seen_trunc = [ts.step_type], False, False
    for a in actions:
        ts = env.step(a)
        obs, rew, term, trunc, info = pool.step(a)
        np.testing.assert_array_equal(ts.observation.obs, obs)
        first = info["elapsed_step"] == 0
        np.testing.assert_array_equal(ts.reward, np.where(first, 0.0, rew))
        np.testing.assert_array_equal(ts.discount, np.where(term, 0.0, 1.0))
        last = ts.step_type == dm_env.StepType.LAST
        np.testing.assert_array_equal(last, term | trunc)
        seen_term |= bool(term.any())
        seen_trunc |= bool(trunc.any())
        assert (ts.discount[trunc] == 1.0).all()
        np.testing.assert_array_equal(ts.observation.env_id, [0, 1, 2])
        types.append(ts.step_type)
    assert seen_term and seen_trunc  # both ends of an episode were exercised
    _grammar(np.stack(types))
    env.close()


def test_specs_and_conventions_match_envpool_make_dm() -> None:
    envpool = pytest.importorskip("envpool")
    ours = make_dm("CartPole-v1", num_envs=2, seed=0)
    peer = envpool.make_dm("CartPole-v1", num_envs=2, seed=0)
    assert ours.observation_spec().obs.shape == peer.observation_spec().obs.shape
    np.testing.assert_allclose(ours.observation_spec().obs.minimum,
                               peer.observation_spec().obs.minimum)
    assert ours.action_spec().num_values == peer.action_spec().num_values
    for env in (ours, peer):  # the same grammar and reward/discount rules on both
        ts = env.reset()
        types = [ts.step_type]
        for _ in range(60):
            ts = env.step(np.ones(2, dtype=np.int32))
            types.append(ts.step_type)
            first = ts.step_type == dm_env.StepType.FIRST
            assert (ts.reward[first] == 0).all() and (ts.discount[first] == 1).all()
            last = ts.step_type == dm_env.StepType.LAST
            assert (ts.discount[last] == 0).all()  # CartPole's pole falls: terminated
        types = np.stack(types)
        assert (types == dm_env.StepType.LAST).sum() >= 2
        _grammar(types)
    ours.close()


def test_async_send_recv_carries_env_ids_and_bad_input_is_refused() -> None:
    env = make_dm("CartPole-v1", num_envs=4, batch_size=2, seed=0)
    env.async_reset()
    got = set()
    for _ in range(6):
        ts = env.recv(timeout=5.0)
        assert ts.observation.obs.shape == (2, 4) and len(ts.step_type) == 2
        got |= set(ts.observation.env_id.tolist())
        env.send(np.ones(2, dtype=np.int64), ts.observation.env_id)
    assert got == {0, 1, 2, 3}
    env.close()
    with pytest.raises(ValueError, match="autoreset='same_step' is not supported"):
        make_dm("CartPole-v1", num_envs=2, autoreset="same_step")
    with pytest.raises(ValueError, match="unknown env id"):
        make_dm("NoSuchEnv-v0")
