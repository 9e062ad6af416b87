"""Frames of the DeepMind Control Suite ids against dm_control's ``physics.render``.

dm_control runs on another MuJoCo than the pool's, so its frames are committed
(``tests/dmc_reference/frames.npz``, ``generate.py --pixels``): the alignment
references' start states (seed 7) and the state after their first actions,
drawn with ``physics.render(height, width, camera_id)``. The pool draws the same
states with its own MuJoCo (:mod:`torchfrag.envs.dmc_rendering`). Tests skip
where MuJoCo has no OpenGL backend, as tests/test_render.py does.
"""
from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import pytest

pytest.importorskip("mujoco")

import gymnasium  # noqa: E402
import torch  # noqa: E402

from torchfrag.envs import PoolEnv, make, make_gymnasium, spec  # noqa: E402
from torchfrag.envs.rendering import RenderError  # noqa: E402

REF_DIR = os.path.join(os.path.dirname(__file__), "dmc_reference")
SEED = 7

try:
    spec("CheetahRun-v1")
except ValueError:
    pytest.skip("dm_control (the dmc extra) is not installed", allow_module_level=True)

with np.load(os.path.join(REF_DIR, "frames.npz")) as _f:
    FRAMES = {k: _f[k] for k in _f.files}


def _drawn(render: Callable[[], Any]) -> Any:
    """``render()``'s frames, or a skip that says why where MuJoCo has no OpenGL backend."""
    try:
        return render()
    except RenderError as e:
        pytest.skip(f"no OpenGL backend for MuJoCo: {e}")


def _views() -> list[tuple[str, int, int, int]]:
    out = set()
    for key in FRAMES:
        env_id, size, cam, _ = key.split(":")
        h, w = map(int, size.split("x"))
        out.add((env_id, h, w, int(cam)))
    return sorted(out)


@pytest.mark.parametrize("env_id,height,width,camera", _views())
def test_frames_match_dm_control_physics_render(env_id: str, height: int, width: int,
                                                camera: int) -> None:
    actions = np.load(os.path.join(REF_DIR, f"{env_id}.npz"))["actions"]
    pool = make(env_id, num_envs=1, seed=SEED)
    pool.configure_render(height=height, width=width, camera_id=camera)
    pool.reset()
    steps = [t for t in range(10) if f"{env_id}:{height}x{width}:{camera}:{t}" in FRAMES]
    for t in range(max(steps) + 1):
        if t:
            pool.step(actions[t - 1][None])
        if t not in steps:
            continue
        ours = _drawn(lambda: pool.render(0))
        ref = FRAMES[f"{env_id}:{height}x{width}:{camera}:{t}"]
        assert ours.shape == ref.shape == (height, width, 3) and ours.dtype == np.uint8
        assert ours.std() > 10, "a blank frame"
        # MuJoCo 4.0 (ours) and 3.17 (dm_control's) on the same Mesa EGL: every one of
        # these frames is pixel-identical (measured). Another OpenGL driver than the one
        # the references were drawn with may shade edges a level apart, hence the small
        # margin; a target out of place (a few dozen pixels at 84 x 84) exceeds it.
        diff = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
        assert diff.mean() < 0.1, f"{env_id} step {t}: mean difference {diff.mean():.3f}"
        assert (diff > 8).any(-1).mean() < 1e-3, f"{env_id} step {t}: frames differ"
    pool.close()


def test_poolenv_from_pixels_as_dmcontrolenv() -> None:
    # DMControlEnv(from_pixels=True) keeps the state beside the pixels (dm_control's pixels
    # wrapper gets pixels_only=None from it), under dm_control's keys.
    env = _drawn(lambda: PoolEnv("CheetahRun-v1", seed=SEED, from_pixels=True,
                                 named_observations=True))
    td = env.reset()
    assert set(env.observation_spec.keys()) == {"pixels", "position", "velocity"}
    assert td["pixels"].shape == (240, 320, 3) and td["pixels"].dtype == torch.uint8
    np.testing.assert_array_equal(td["pixels"].numpy(), FRAMES["CheetahRun-v1:240x320:0:0"])
    env.close()
    env = PoolEnv("CheetahRun-v1", 2, from_pixels=True, pixels_only=True, info_keys=[],
                  render_kwargs={"width": 64, "height": 64})
    assert set(env.observation_spec.keys()) == {"pixels"}
    assert env.reset()["pixels"].shape == (2, 64, 64, 3)
    env.close()
    assert set(PoolEnv("CheetahRun-v1", from_pixels=True).observation_spec.keys()) == {
        "pixels", "observation"}
    env = PoolEnv("WalkerWalk-v1", 2, seed=SEED, from_pixels=True, pixels_only=False,
                  named_observations=True, max_episode_steps=2,
                  render_kwargs={"width": 84, "height": 84})
    out = env.rollout(3, break_when_any_done=False)
    assert {"pixels", "orientations", "height", "velocity"} <= set(out["next"].keys())
    assert out["next", "pixels"].shape == (2, 3, 84, 84, 3)
    # The terminal frame (step 2) differs from the new episode's first (root of step 3).
    assert not torch.equal(out["next", "pixels"][:, 1], out["pixels"][:, 2])
    env.close()


def test_gymnasium_render_and_bad_arguments() -> None:
    envs = make_gymnasium("ReacherEasy-v1", num_envs=2, render_mode="rgb_array", width=64,
                          height=48)
    envs.reset(seed=0)
    frames = _drawn(envs.render)
    assert len(frames) == 2 and all(f.shape == (48, 64, 3) for f in frames)
    assert not np.array_equal(frames[0], frames[1])  # two targets, two arms
    assert envs.metadata["render_fps"] == 50  # one frame per control step (20 ms)
    envs.close()
    single = gymnasium.make("torchfrag/CartpoleSwingup-v1", render_mode="rgb_array")
    single.reset(seed=0)
    assert single.render().shape == (240, 320, 3)
    single.close()
    pool = make("CheetahRun-v1")
    pool.reset()
    with pytest.raises(ValueError, match="camera_id must be"):
        pool.configure_render(camera_id=9)
        pool.render(0)
    with pytest.raises(ValueError, match="unknown rendering arguments"):
        pool.configure_render(camera_name="side")
    pool.close()
