"""The pool's Gymnasium vector env against Gymnasium's own: final_info, reset_mask, seeds, modes, wrappers."""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from torchfrag.envs import list_envs, make_gymnasium


@pytest.mark.skipif("HalfCheetah-v5" not in list_envs(), reason="MuJoCo envs not built")
def test_final_info_equals_gymnasium_same_step() -> None:
    pytest.importorskip("mujoco")
    n, limit = 2, 5
    ours = make_gymnasium("HalfCheetah-v5", num_envs=n, autoreset=AutoresetMode.SAME_STEP,
                          max_episode_steps=limit, seed=0)
    ref = SyncVectorEnv([lambda: gymnasium.make("HalfCheetah-v5", max_episode_steps=limit)] * n,
                        autoreset_mode=AutoresetMode.SAME_STEP)
    _, info = ours.reset(seed=0)
    ref.reset(seed=0)
    for i, env in enumerate(ref.envs):  # start Gymnasium's envs from our initial states
        env.unwrapped.set_state(info["qpos0"][i], info["qvel0"][i])
    rng = np.random.default_rng(0)
    for t in range(limit):
        action = rng.uniform(-1, 1, (n, 6)).astype(np.float32)
        o1, r1, te1, tr1, i1 = ours.step(action)
        o2, r2, te2, tr2, i2 = ref.step(action)
        np.testing.assert_array_equal(tr1, tr2)
        np.testing.assert_array_equal(te1, te2)
        np.testing.assert_allclose(r1, r2, rtol=1e-6, atol=1e-8)
        if t < limit - 1:
            np.testing.assert_allclose(o1, o2, rtol=1e-6, atol=1e-8)
            assert "final_info" not in i1 and "final_info" not in i2
    # The terminal step: same final_obs and final_info, keys and masks as Gymnasium's.
    assert tr1.all()
    np.testing.assert_array_equal(i1["_final_obs"], i2["_final_obs"])
    np.testing.assert_array_equal(i1["_final_info"], i2["_final_info"])
    for k in range(n):
        np.testing.assert_allclose(i1["final_obs"][k], i2["final_obs"][k], rtol=1e-6, atol=1e-8)
    shared = set(i2["final_info"])
    assert shared <= set(i1["final_info"])
    for key in shared:
        if key.startswith("_"):
            np.testing.assert_array_equal(i1["final_info"][key], i2["final_info"][key])
        else:
            np.testing.assert_allclose(i1["final_info"][key], i2["final_info"][key], rtol=1e-6,
                                       atol=1e-8, err_msg=key)
    assert not any(k.startswith("final_") for k in i1 if k not in ("final_obs", "final_info"))
    assert not any(k.startswith("final_") for k in i1["final_info"])
    ours.close()
    ref.close()


def test_final_info_is_the_terminal_steps_cartpole() -> None:
    envs = make_gymnasium("CartPole-v1", num_envs=3, autoreset="same_step", seed=0,
                          max_episode_steps=7)
    envs.reset(seed=0)
    for _ in range(7):
        _, _, term, trunc, info = envs.step(np.zeros(3, dtype=np.int64))
    assert (term | trunc).all()
    fi = info["final_info"]
    # "state" after 7 steps is the terminal state, not the new episode's.
    for i in range(3):
        np.testing.assert_allclose(fi["state"][i], info["final_obs"][i], rtol=1e-6)
        assert not np.allclose(fi["state"][i], info["state"][i])
    assert (fi["elapsed_step"] == 7).all()
    assert "final_state" not in info
    envs.close()


def test_one_seeding_rule_on_every_face() -> None:
    """An int seed means the same on the raw pool, make_gymnasium and gymnasium.make_vec
    (EnvPool's own tests assert this agreement): trajectories, not only first observations."""
    import gymnasium

    from torchfrag.envs import make

    rng = np.random.default_rng(0)
    actions = [rng.uniform(-2, 2, size=(4, 1)).astype(np.float32) for _ in range(20)]
    faces = [make_gymnasium("Pendulum-v1", num_envs=4),
             gymnasium.make_vec("torchfrag/Pendulum-v1", num_envs=4,
                                vectorization_mode="vector_entry_point")]
    pool = make("Pendulum-v1", num_envs=4, seed=5)
    ref = [pool.reset()[0].copy()] + [pool.step(a)[0].copy() for a in actions]
    for envs in faces:
        got = [envs.reset(seed=5)[0]] + [envs.step(a)[0] for a in actions]
        np.testing.assert_array_equal(np.stack(got), np.stack(ref))
        # Adjacent seeds do not share streams (Gymnasium's s + i would make these equal).
        other, _ = envs.reset(seed=6)
        assert not np.allclose(ref[0][1], other[0])
        # A list seeds each env explicitly; a masked reset with an int seed gives those envs
        # the pool rule's share.
        b, _ = envs.reset(seed=[5, 6, 7, 8])
        c, _ = envs.reset(seed=[6, 7, 8, 9])
        np.testing.assert_array_equal(b[1:], c[:3])
        if hasattr(envs, "pool"):
            envs.reset(seed=9)
            mask = np.array([False, True, False, True])
            part, _ = envs.reset(seed=5, options={"reset_mask": mask})
            np.testing.assert_array_equal(part[mask], ref[0][mask])
        envs.close()


def test_reset_mask() -> None:
    envs = make_gymnasium("CartPole-v1", num_envs=4, seed=0)
    obs, _ = envs.reset(seed=0)
    for _ in range(3):
        obs, *_ = envs.step(np.ones(4, dtype=np.int64))
    mask = np.array([True, False, True, False])
    new, info = envs.reset(seed=[10, 11, 12, 13], options={"reset_mask": mask})
    np.testing.assert_array_equal(new[~mask], obs[~mask])
    assert (np.abs(new[mask]) <= 0.05).all()
    np.testing.assert_array_equal(info["_elapsed_step"], mask)
    fresh, _ = envs.reset(seed=[10, 11, 12, 13])
    np.testing.assert_array_equal(new[mask], fresh[mask])  # same per-env seeds, same start
    for bad, err in ((np.array([1, 0, 0, 0]), TypeError), (np.zeros(4, bool), ValueError),
                     (np.ones(3, bool), ValueError), ([True] * 4, TypeError)):
        with pytest.raises(err, match="reset_mask"):
            envs.reset(options={"reset_mask": bad})
    envs.close()


def test_reset_mask_matches_gymnasium_layout() -> None:
    ref = SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 3)
    ours = make_gymnasium("CartPole-v1", num_envs=3)
    mask = np.array([False, True, False])
    for env in (ref, ours):
        env.reset(seed=0)
    _, i_ref = ref.reset(options={"reset_mask": mask.copy()})
    _, i_ours = ours.reset(options={"reset_mask": mask.copy()})
    assert set(i_ref) <= set(i_ours)  # Gymnasium's CartPole has no infos; ours add env_id...
    for key in i_ours:
        if key.startswith("_"):
            np.testing.assert_array_equal(i_ours[key], mask)
    ref.close()
    ours.close()


def test_autoreset_mode_enum_and_attribute() -> None:
    for mode in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED):
        envs = make_gymnasium("CartPole-v1", num_envs=2, autoreset=mode)
        assert envs.autoreset_mode == mode == envs.metadata["autoreset_mode"]
        envs.close()
    envs = make_gymnasium("CartPole-v1", num_envs=2, autoreset="same_step")
    assert envs.autoreset_mode == AutoresetMode.SAME_STEP
    envs.close()
    with pytest.raises(ValueError, match="autoreset"):
        make_gymnasium("CartPole-v1", num_envs=2, autoreset="never")


def test_render_mode_is_kept_or_refused_not_dropped() -> None:
    # Frames themselves are compared with Gymnasium's in tests/test_render.py.
    with pytest.raises(ValueError, match="render_mode='human' is not supported"):
        make_gymnasium("CartPole-v1", num_envs=2, render_mode="human")
    envs = make_gymnasium("CartPole-v1", num_envs=2, render_mode=None)
    assert envs.render_mode is None
    envs.close()
    envs = make_gymnasium("CartPole-v1", num_envs=2, render_mode="rgb_array")
    assert envs.render_mode == "rgb_array"
    envs.close()


def test_torchrl_gym_wrapper_over_make_vec() -> None:
    pytest.importorskip("torchrl")
    from torchrl.envs import GymWrapper
    from torchrl.envs.utils import check_env_specs

    vec = gymnasium.make_vec("torchfrag/CartPole-v1", num_envs=4,
                             vectorization_mode="vector_entry_point",
                             autoreset_mode=AutoresetMode.SAME_STEP)
    assert vec.autoreset_mode == AutoresetMode.SAME_STEP
    env = GymWrapper(vec)
    assert env.batch_size == (4,)
    check_env_specs(env)
    td = env.rollout(50, break_when_any_done=False)
    assert td.batch_size == (4, 50) and bool(td["next", "done"].any())
    env.close()


def test_torchrl_gym_env_over_registered_id() -> None:
    pytest.importorskip("torchrl")
    from torchrl.envs import GymEnv

    env = GymEnv("torchfrag/CartPole-v1")
    td = env.rollout(20)
    assert td["observation"].shape[-1] == 4
    env.close()
    env = GymEnv("torchfrag/CartPole-v1", frame_skip=2)  # TorchRL skips frames itself
    assert env.rollout(5)["next", "reward"].max() == 2.0
    env.close()


def test_autoreset_disabled_keeps_finished_envs_until_the_user_resets_them() -> None:
    """Gymnasium's AutoresetMode.DISABLED: a finished env is not reset by the next step;
    stepping it before a reset is refused in one line; after a masked reset it steps on
    from its new first observation (not reset a second time)."""
    import gymnasium
    from gymnasium.vector import AutoresetMode

    envs = gymnasium.make_vec("torchfrag/CartPole-v1", num_envs=3,
                              vectorization_mode="vector_entry_point",
                              autoreset_mode=AutoresetMode.DISABLED)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.DISABLED
    envs.reset(seed=0)
    push = np.ones(3, dtype=np.int64)  # always right: every pole falls within ~10-60 steps
    for _ in range(200):
        _, _, term, trunc, info = envs.step(push)
        done = term | trunc
        if done.any():
            break
    assert done.any()
    with pytest.raises(ValueError, match=r"finished their episode and autoreset is disabled"):
        envs.step(push)
    first, _ = envs.reset(options={"reset_mask": done})
    obs, _, _, _, info = envs.step(push)
    assert (info["elapsed_step"][done] == 1).all()  # one step into the new episode
    assert not np.allclose(obs[done], first[done])
    envs.close()


@pytest.mark.parametrize("mode", ["DISABLED", "SAME_STEP"])
def test_torchrl_gymwrapper_over_make_vec(mode: str) -> None:
    """TorchRL's GymWrapper accepts a vector env in SAME_STEP or DISABLED mode (it refuses
    NEXT_STEP for Gymnasium's own vector envs too); both run and pass check_env_specs, with
    episodes ending and restarting inside one rollout."""
    import gymnasium
    import torch
    from gymnasium.vector import AutoresetMode
    from torchrl.envs import GymWrapper
    from torchrl.envs.utils import check_env_specs

    vec = gymnasium.make_vec("torchfrag/CartPole-v1", num_envs=4,
                             vectorization_mode="vector_entry_point",
                             autoreset_mode=getattr(AutoresetMode, mode))
    env = GymWrapper(vec)
    check_env_specs(env)
    torch.manual_seed(0)
    td = env.rollout(120, break_when_any_done=False)
    assert td.shape == (4, 120) and int(td["next", "done"].sum()) >= 4
    # No observation leaks out of the CartPole bounds: finished envs were reset, not stepped on.
    assert float(td["next", "observation"][..., 2].abs().max()) < 0.25
    env.close()
