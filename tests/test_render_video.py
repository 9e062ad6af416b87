"""video=true: an MP4 of the final evaluation episodes from render() frames, for every family."""
from __future__ import annotations

import numpy as np
import pytest

from torchfrag.envs import list_envs
from torchfrag.train import compose_config, train


def _frames_in(path: str) -> tuple[int, tuple[int, ...]]:
    """Frame count and frame shape of a video, read back with ffmpeg."""
    import imageio.v2 as imageio

    with imageio.get_reader(path, format="FFMPEG") as reader:
        frames = [f for f in reader]
    return len(frames), frames[0].shape


@pytest.mark.parametrize("overrides, shape", [
    pytest.param(["env=CartPole-v1", "algo.num_envs=2", "algo.steps=16", "algo.epochs=1",
                  "algo.minibatch_size=32", "algo.total_frames=32"], (400, 600, 3),
                 id="classic"),
    pytest.param(["env=Breakout-v5", "algo=ppo_atari", "algo.num_envs=2", "algo.steps=16",
                  "algo.epochs=1", "algo.minibatch_size=32", "algo.total_frames=32"],
                 (210, 160, 3),
                 marks=pytest.mark.skipif("Breakout-v5" not in list_envs(), reason="no Atari"),
                 id="atari"),
    pytest.param(["env=Hopper-v5", "algo.num_envs=2", "algo.steps=16", "algo.epochs=1",
                  "algo.minibatch_size=32", "algo.total_frames=32"], (480, 480, 3),
                 marks=pytest.mark.skipif("Hopper-v5" not in list_envs(), reason="no MuJoCo"),
                 id="mujoco"),
])
def test_video_of_the_final_evaluation(tmp_path, overrides: list[str], shape: tuple) -> None:
    pytest.importorskip("imageio_ffmpeg")
    if "env=CartPole-v1" in overrides:
        pytest.importorskip("pygame")
    cfg = compose_config([*overrides, "eval_episodes=2", "env.eval_envs=2", "video=true",
                          "progress=false", "plot=false", "logger=none"])
    summary = train(cfg, run_dir=str(tmp_path))
    path = tmp_path / "eval_video.mp4"
    assert summary["video"] == str(path) and path.stat().st_size > 0
    count, frame_shape = _frames_in(str(path))
    # As Gymnasium's RecordVideo: a frame after each reset and each step of env 0's recorded
    # episodes (steps and episodes counted by the evaluation itself).
    assert summary["video_episodes"] >= 1 and summary["video_steps"] >= 1
    assert count == summary["video_frames"] == summary["video_steps"] + summary["video_episodes"]
    assert frame_shape == shape


def test_video_as_gif_without_ffmpeg(tmp_path, monkeypatch) -> None:
    """Without imageio-ffmpeg the same frames go to a GIF (Pillow)."""
    pytest.importorskip("pygame")
    import importlib.util

    from PIL import Image, ImageSequence

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "imageio_ffmpeg" else real(name, *a))
    cfg = compose_config(["env=CartPole-v1", "algo.num_envs=2", "algo.steps=16", "algo.epochs=1",
                          "algo.minibatch_size=32", "algo.total_frames=32", "eval_episodes=1",
                          "env.eval_envs=1", "video=true", "progress=false", "plot=false",
                          "logger=none"])
    summary = train(cfg, run_dir=str(tmp_path))
    path = tmp_path / "eval_video.gif"
    assert summary["video"] == str(path)
    with Image.open(path) as gif:
        # Pillow merges identical consecutive frames: count frames by duration (20 ms at 50 fps).
        total_ms = sum(f.info["duration"] for f in ImageSequence.Iterator(gif))
        size = gif.size
    assert round(total_ms / 20) == summary["video_frames"] == summary["video_steps"] + 1
    assert size == (600, 400)


def test_video_needs_an_env_that_renders_and_evaluation(tmp_path) -> None:
    cfg = compose_config(["env=CartPole-v1", "video=true", "eval_episodes=0", "progress=false"])
    with pytest.raises(ValueError, match="set eval_episodes>0"):
        train(cfg, run_dir=str(tmp_path))
    cfg = compose_config(["env=CartPole-v1", "env.id=Debug-v0", "video=true", "progress=false"])
    with pytest.raises(ValueError, match="video=true: Debug-v0 has no frames to render"):
        train(cfg, run_dir=str(tmp_path))


def test_video_frames_are_render_frames(tmp_path) -> None:
    """The recorded frames are env 0's render() frames: after the reset, ..., the terminal one."""
    pytest.importorskip("pygame")
    from omegaconf import OmegaConf

    from torchfrag.train import _evaluate

    cfg = OmegaConf.create({"env": {"id": "CartPole-v1", "eval_envs": 1, "options": {}}})

    import torch
    from tensordict.nn import TensorDictModule

    class PushRight(torch.nn.Module):  # a user policy: always push right
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.ones(obs.shape[:-1], dtype=torch.int64)

    actor = TensorDictModule(PushRight(), ["observation"], ["action"])

    frames: list = []
    steps: list = []
    returns = _evaluate(cfg, actor, 1, seed=123, frames=frames, frame_steps=steps)
    assert len(frames) == sum(steps) + 1 == int(returns[0]) + 1  # CartPole: reward 1 per step
    # Replayed on a next_step pool (no auto-reset within the step): the same frames.
    from torchfrag.envs import make

    pool = make("CartPole-v1", 1, seed=123)
    pool.reset()
    replay = [pool.render(0)]
    for _ in range(steps[0]):
        pool.step(np.ones(1, dtype=np.int64))
        replay.append(pool.render(0))
    assert len(replay) == len(frames)
    for t, (a, b) in enumerate(zip(frames, replay)):
        np.testing.assert_array_equal(a, b, err_msg=f"frame {t}")
    pool.close()
