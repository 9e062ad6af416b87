"""render(): the pool's frames against Gymnasium's own envs' render() frames.

Each test starts a Gymnasium env from the pool env's state (as the alignment
tests of each family do), steps both with the same actions and compares the
frames after the reset and after every step.
"""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from test_classic_control import _random_actions as _actions

from torchfrag.envs import PoolClosedError, list_envs, make, make_gymnasium
from torchfrag.envs.rendering import RenderError

CLASSIC = ["CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0",
           "Acrobot-v1"]


# -- classic control --------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", CLASSIC)
def test_classic_control_frames_equal_gymnasium(env_id: str) -> None:
    pytest.importorskip("pygame")
    num_envs, steps = 2, 30
    pool = make(env_id, num_envs=num_envs, seed=11)
    refs = [gymnasium.make(env_id, render_mode="rgb_array") for _ in range(num_envs)]
    _, info = pool.reset()
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
        # Our reset state, in the dtype Gymnasium's reset leaves it (Acrobot: float32).
        ref.unwrapped.state = info["state"][i].astype(ref.unwrapped.state.dtype)
    rng = np.random.default_rng(0)
    alive = np.ones(num_envs, dtype=bool)
    compared = 0
    for t in range(steps + 1):
        for i, ref in enumerate(refs):
            if alive[i]:
                ours, theirs = pool.render(i), ref.render()
                assert ours.dtype == np.uint8 and ours.shape == theirs.shape
                np.testing.assert_array_equal(ours, theirs, err_msg=f"{env_id} env {i} step {t}")
                compared += 1
        if t == steps:
            break
        actions = _actions(pool.action_space, rng, num_envs)
        _, _, term, trunc, _ = pool.step(actions)
        for i, ref in enumerate(refs):
            if alive[i]:
                ref.step(int(actions[i]) if actions.ndim == 1 else actions[i])
        alive &= ~(term | trunc)  # next_step auto-reset: the next step would restart it
    assert compared >= 16  # several steps of each env (random CartPole episodes are short)
    pool.close()


def test_classic_control_picture_options_follow_the_pool() -> None:
    """A longer pole (option ``length``, per env) is drawn longer, as Gymnasium draws it."""
    pytest.importorskip("pygame")
    pool = make("CartPole-v1", num_envs=2, seed=0, length=[0.5, 1.0])
    _, info = pool.reset()
    ref = gymnasium.make("CartPole-v1", render_mode="rgb_array")
    ref.reset(seed=0)
    ref.unwrapped.length = 1.0
    ref.unwrapped.state = np.array(info["state"][1], dtype=np.float64)
    np.testing.assert_array_equal(pool.render(1), ref.render())
    assert not np.array_equal(pool.render(0), pool.render(1)[:, :, :])


@pytest.mark.parametrize("autoreset", ["same_step", "next_step"])
def test_terminal_frames_equal_gymnasium(autoreset: str) -> None:
    """keep_final_frames: the frame of each episode's terminal state, though the pool reset it."""
    pytest.importorskip("pygame")
    pool = make("CartPole-v1", num_envs=2, seed=4, autoreset=autoreset)
    pool.keep_final_frames(1)
    ref = gymnasium.make("CartPole-v1", render_mode="rgb_array")
    _, info = pool.reset()
    ref.reset(seed=0)
    ref.unwrapped.state = info["state"][1].copy()
    rng = np.random.default_rng(3)
    with pytest.raises(RuntimeError, match="has not finished an episode"):
        pool.render(1, final=True)
    with pytest.raises(RuntimeError, match="needs keep_final_render\\(0\\)"):
        pool.render(0, final=True)
    for _ in range(500):
        a = rng.integers(0, 2, size=2)
        _, _, term, trunc, _ = pool.step(a)
        ref.step(int(a[1]))
        if term[1] or trunc[1]:
            break
    assert term[1]
    terminal = ref.render()
    np.testing.assert_array_equal(pool.render(1, final=True), terminal)
    if autoreset == "same_step":  # env 1 already plays its next episode
        assert not np.array_equal(pool.render(1), terminal)
    pool.keep_final_frames(1, keep=False)
    with pytest.raises(RuntimeError, match="needs keep_final_render"):
        pool.render(1, final=True)
    pool.close()


# -- Atari --------------------------------------------------------------------------------------
@pytest.mark.skipif("Breakout-v5" not in list_envs(), reason="Atari not built")
@pytest.mark.parametrize("game", ["Breakout", "Pong"])
def test_atari_raw_screen_equals_ale_py_render(game: str) -> None:
    ale_py = pytest.importorskip("ale_py")
    gymnasium.register_envs(ale_py)
    # Settings under which the pool and ale-py step identically: frame skip 4
    # without max-pool effects on the screen, no no-ops, no FIRE, no sticky actions.
    pool = make(f"{game}-v5", num_envs=2, seed=0, noop_max=0, use_fire_reset=False,
                repeat_action_probability=0.0, frame_skip=4)
    refs = [gymnasium.make(f"ALE/{game}-v5", frameskip=4, repeat_action_probability=0.0,
                           render_mode="rgb_array") for _ in range(2)]
    pool.reset()
    for ref in refs:
        ref.reset(seed=0)
    acts = np.random.default_rng(1).integers(0, pool.action_space.n, size=(60, 2))
    differing = 0
    for t in range(len(acts) + 1):
        for i, ref in enumerate(refs):
            ours = pool.render(i)
            assert ours.shape == (210, 160, 3) and ours.dtype == np.uint8
            np.testing.assert_array_equal(ours, ref.render(), err_msg=f"{game} env {i} step {t}")
        differing += not np.array_equal(pool.render(0), pool.render(1))
        if t < len(acts):
            pool.step(acts[t])
            for i, ref in enumerate(refs):
                ref.step(int(acts[t, i]))
    assert differing > 0  # the two envs' different actions show on their screens


# -- MuJoCo --------------------------------------------------------------------------------------
def _render_or_skip(pool, i: int) -> np.ndarray:
    try:
        return pool.render(i)
    except RenderError as e:  # no OpenGL backend at all: say why
        pytest.skip(f"no OpenGL backend for MuJoCo: {e}")


@pytest.mark.skipif("HalfCheetah-v5" not in list_envs(), reason="MuJoCo envs not built")
@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5"])
def test_mujoco_frames_match_gymnasium(env_id: str) -> None:
    """Same state: equal frames. Stepped: equal qpos/qvel, frames within a small mean difference.

    The pool's frame is drawn from the state after the step (``set_state`` =
    qpos/qvel + ``mj_forward``). Gymnasium draws whatever kinematics its data
    holds after ``mj_step``, which are not those of the state: with MuJoCo's
    Euler integrator (HalfCheetah) those of the last substep's start (measured:
    mean absolute difference 0.25-0.86 of 255 per channel, ~3% of pixels);
    with RK4 (Hopper) those of its last stage (a few pixels off by one level).
    """
    pytest.importorskip("mujoco")
    pool = make(env_id, num_envs=1, seed=3)
    ref = gymnasium.make(env_id, render_mode="rgb_array")
    _, info = pool.reset()
    ref.reset(seed=0)
    ref.unwrapped.set_state(info["qpos0"][0].copy(), info["qvel0"][0].copy())
    ours = _render_or_skip(pool, 0)
    np.testing.assert_array_equal(ours, ref.render())  # same state, same drawing: exact
    assert ours.shape == (480, 480, 3)
    rng = np.random.default_rng(0)
    nq = ref.unwrapped.model.nq
    for t in range(8):
        a = rng.uniform(-1, 1, (1, *pool.action_space.shape)).astype(np.float32)
        pool.step(a)
        ref.step(a[0])
        state = pool._pool.render_data(0)
        np.testing.assert_array_equal(state[:nq], ref.unwrapped.data.qpos)
        np.testing.assert_array_equal(state[nq:], ref.unwrapped.data.qvel)
        ours, theirs = pool.render(0), ref.render()
        diff = float(np.abs(ours.astype(np.int16) - theirs.astype(np.int16)).mean())
        assert diff < 2.0, f"{env_id} step {t}: mean pixel difference {diff:.3f}"
        # Gymnasium's frame of the same state (set_state = qpos/qvel + mj_forward) is ours exactly.
        ref.unwrapped.set_state(state[:nq].copy(), state[nq:].copy())
        np.testing.assert_array_equal(ours, ref.render(), err_msg=f"{env_id} step {t}")


@pytest.mark.skipif("HalfCheetah-v5" not in list_envs(), reason="MuJoCo envs not built")
def test_mujoco_rendering_arguments() -> None:
    pytest.importorskip("mujoco")
    envs = make_gymnasium("HalfCheetah-v5", num_envs=2, render_mode="rgb_array", width=64,
                          height=48)
    envs.reset(seed=0)
    try:
        frames = envs.render()
    except RenderError as e:
        pytest.skip(f"no OpenGL backend for MuJoCo: {e}")
    assert len(frames) == 2 and all(f.shape == (48, 64, 3) for f in frames)
    assert envs.metadata["render_fps"] == 20  # Gymnasium's: round(1 / dt)
    envs.close()
    with pytest.raises(ValueError, match="need render_mode='rgb_array'"):
        make_gymnasium("HalfCheetah-v5", num_envs=1, width=64)


# -- the APIs -------------------------------------------------------------------------------------
def test_gymnasium_single_env_render() -> None:
    pytest.importorskip("pygame")
    env = gymnasium.make("torchfrag/CartPole-v1", render_mode="rgb_array")
    ref = gymnasium.make("CartPole-v1", render_mode="rgb_array")
    _, info = env.reset(seed=5)
    ref.reset(seed=0)
    ref.unwrapped.state = np.array(info["state"], dtype=np.float64)
    for _ in range(5):
        np.testing.assert_array_equal(env.render(), ref.render())
        env.step(1)
        ref.step(1)
    assert env.metadata["render_fps"] == ref.metadata["render_fps"] == 50
    assert env.render_mode == "rgb_array"
    env.close()


def test_gymnasium_vector_env_renders_every_env() -> None:
    pytest.importorskip("pygame")
    envs = make_gymnasium("Pendulum-v1", num_envs=3, render_mode="rgb_array")
    envs.reset(seed=0)
    envs.step(np.array([[2.0], [-1.0], [0.5]], dtype=np.float32))
    frames = envs.render()
    assert isinstance(frames, tuple) and len(frames) == 3
    for i, f in enumerate(frames):
        np.testing.assert_array_equal(f, envs.pool.render(i))
    # Different angles and torques: different pictures.
    assert not np.array_equal(frames[0], frames[1])
    envs.close()


@pytest.mark.parametrize("mode", ["vector_entry_point", "sync"])
def test_gymnasium_make_vec_render_mode(mode: str) -> None:
    """Both of Gymnasium's ways to vectorise a torchfrag id pass render_mode through."""
    pytest.importorskip("pygame")
    envs = gymnasium.make_vec("torchfrag/Pendulum-v1", num_envs=2, vectorization_mode=mode,
                              render_mode="rgb_array")
    envs.reset(seed=0)
    frames = envs.render()
    assert envs.render_mode == "rgb_array" and len(frames) == 2
    assert all(f.shape == (500, 500, 3) for f in frames)
    assert envs.metadata["render_fps"] == 30
    envs.close()


def test_render_without_render_mode_warns_like_gymnasium() -> None:
    envs = make_gymnasium("CartPole-v1", num_envs=2)
    envs.reset(seed=0)
    with pytest.warns(UserWarning, match="without specifying any render mode"):
        assert envs.render() is None
    envs.close()


@pytest.mark.parametrize("maker", [
    lambda mode: make_gymnasium("CartPole-v1", num_envs=2, render_mode=mode),
    lambda mode: gymnasium.make("torchfrag/CartPole-v1", render_mode=mode),
])
def test_unsupported_render_modes_are_refused(maker) -> None:
    with pytest.raises(ValueError, match="render_mode='human' is not supported: 'human' opens a"):
        maker("human")
    with pytest.raises(ValueError, match="render_mode='ansi' is not supported"):
        maker("ansi")


def test_pool_env_render() -> None:
    pytest.importorskip("pygame")
    from torchfrag.envs import PoolEnv

    env = PoolEnv("CartPole-v1", num_envs=3, seed=0)
    env.reset()
    frames = env.render(None)
    assert frames.shape == (3, 400, 600, 3) and frames.dtype == np.uint8
    np.testing.assert_array_equal(env.render(2), frames[2])
    single = PoolEnv("CartPole-v1")  # unbatched, GymEnv-like
    single.reset()
    assert single.render().shape == (400, 600, 3)
    env.close()
    single.close()


def test_torchrl_pixel_render_transform() -> None:
    """TorchRL's own PixelRenderTransform records PoolEnv frames, as it does for GymEnv."""
    pytest.importorskip("pygame")
    from torchrl.envs import TransformedEnv
    from torchrl.record import PixelRenderTransform

    from torchfrag.envs import PoolEnv

    env = TransformedEnv(PoolEnv("MountainCar-v0"), PixelRenderTransform())
    td = env.rollout(4)
    assert td["pixels"].shape == (4, 400, 600, 3)
    env.close()


def test_torchrl_gym_env_from_pixels() -> None:
    """TorchRL's GymEnv(..., from_pixels=True) over a torchfrag id: pixels are our frames."""
    pytest.importorskip("pygame")
    from torchrl.envs import GymEnv

    env = GymEnv("torchfrag/Acrobot-v1", from_pixels=True, pixels_only=False)
    td = env.rollout(5)
    assert td["pixels"].shape == (5, 500, 500, 3) and td["pixels"].dtype == torch.uint8
    last = env._env.unwrapped.pool.render(0)  # the state after the last step
    np.testing.assert_array_equal(td["next", "pixels"][-1].numpy(), last)
    env.close()


def test_render_misuse_gives_clear_errors() -> None:
    pool = make("CartPole-v1", num_envs=2, batch_size=1)
    with pytest.raises(RuntimeError, match="call reset\\(\\) before render\\(\\)"):
        pool.render(0)
    pool.reset()
    with pytest.raises(ValueError, match="env_index 2 is out of range \\[0, 2\\)"):
        pool.render(2)
    with pytest.raises(ValueError, match="env_index -1 is out of range"):
        pool.render(-1)
    with pytest.raises(TypeError, match="env_index must be an int"):
        pool.render(True)
    with pytest.raises(TypeError, match="env_index must be an int"):
        pool.render(0.0)
    pool.send(np.zeros(1, dtype=np.int64), [1])
    with pytest.raises(RuntimeError, match="cannot render env 1 while it is in flight"):
        pool.render(1)
    pool.recv()
    pool.close()
    with pytest.raises(PoolClosedError):
        pool.render(0)
    debug = make("Debug-v0", num_envs=1)
    debug.reset()
    with pytest.raises(ValueError, match="Debug-v0 has nothing to render"):
        debug.render(0)
    with pytest.raises(ValueError, match="Debug-v0 has no frames to render"):
        debug.keep_final_frames(0)
    debug.close()


def test_rendering_costs_nothing_until_asked() -> None:
    """No renderer, no pygame, not even the rendering module, before the first render()."""
    import subprocess
    import sys

    code = ("import sys; from torchfrag.envs import make, PoolEnv; p = make('CartPole-v1', 4);"
            " p.reset(); p.step(p.random_actions()); e = PoolEnv('CartPole-v1', 2); e.rollout(3);"
            " assert p._renderer is None;"
            " assert not {'pygame', 'torchfrag.envs.rendering'} & set(sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
