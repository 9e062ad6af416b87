"""PoolEnv as a literal rename of TorchRL's GymEnv: GymEnv's keyword arguments, GymEnv's meaning.

Each case builds the real ``GymEnv`` and ``PoolEnv`` with the same id and
arguments and compares what a script sees (spec keys, shapes, dtypes, spec
classes), or checks the refusal of an argument the pool cannot honour.
"""
from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("torchrl")

from torchrl.envs import GymEnv  # noqa: E402

from torchfrag.envs import PoolEnv, list_envs  # noqa: E402

HAS_ATARI = "Pong-v5" in list_envs()


def _face(env) -> dict:
    """What a script reads off an env's specs."""
    obs = {k: (tuple(v.shape), v.dtype, type(v).__name__) for k, v in env.observation_spec.items()}
    act = env.action_spec
    return {"obs": obs, "action": (type(act).__name__, tuple(act.shape), act.dtype),
            "reward": (tuple(env.reward_spec.shape), env.reward_spec.dtype),
            "done": sorted(env.done_keys), "batch": tuple(env.batch_size)}


CASES = [
    ("CartPole-v1", {}),
    ("CartPole-v1", {"categorical_action_encoding": True, "frame_skip": 2}),
    ("CartPole-v1", {"from_pixels": True}),
    ("CartPole-v1", {"from_pixels": True, "pixels_only": False}),
    ("Pendulum-v1", {"device": "cpu", "batch_size": []}),
]
if HAS_ATARI:
    CASES += [
        ("ALE/Pong-v5", {}),
        ("ALE/Pong-v5", {"frame_skip": 4, "from_pixels": True, "pixels_only": False,
                         "categorical_action_encoding": True}),
    ]


@pytest.mark.parametrize("env_id,kwargs", CASES, ids=[f"{i}-{sorted(k)}" for i, k in CASES])
def test_specs_are_gymenvs(env_id: str, kwargs: dict) -> None:
    if kwargs.get("from_pixels") and "ALE" not in env_id:
        pytest.importorskip("pygame")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = GymEnv(env_id, **kwargs)
    ours = PoolEnv(env_id, **kwargs)
    assert _face(ours) == _face(ref)
    td = ours.rollout(5)  # and it runs, with what the specs say
    for key in ours.observation_spec.keys():
        assert td["next", key].dtype == ours.observation_spec[key].dtype
    ref.close()
    ours.close()


def test_frame_skip_sums_rewards_like_gymenv() -> None:
    """CartPole with frame_skip=3: GymEnv's repeat, step for step, once the reference is synced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = GymEnv("CartPole-v1", frame_skip=3, categorical_action_encoding=True)
    ours = PoolEnv("CartPole-v1", frame_skip=3, categorical_action_encoding=True, seed=1)
    td = ours.reset()
    ref_td = ref.reset()
    ref._env.unwrapped.state = td["observation"].numpy().astype(np.float64)
    rng = np.random.default_rng(0)
    rewards = []
    for _ in range(60):
        action = torch.tensor(int(rng.integers(2)))
        a = ours.step(td.set("action", action))
        b = ref.step(ref_td.set("action", action))
        np.testing.assert_allclose(a["next", "observation"].numpy(),
                                   b["next", "observation"].numpy(), atol=1e-5)
        assert float(a["next", "reward"]) == float(b["next", "reward"])
        assert bool(a["next", "done"]) == bool(b["next", "done"])
        rewards.append(float(a["next", "reward"]))
        if bool(a["next", "done"]):
            break
        td, ref_td = a["next"].clone(), b["next"].clone()
    assert rewards[0] == 3.0 and bool(a["next", "done"])  # repeats summed, ran to the end
    ours.close()
    ref.close()


def test_frame_skip_batched_stops_each_env_at_its_end() -> None:
    env = PoolEnv("CartPole-v1", 4, frame_skip=3, seed=0, info_keys=["elapsed_step"])
    td = env.rollout(120, break_when_any_done=False)
    reward = td["next", "reward"].squeeze(-1)
    done = td["next", "done"].squeeze(-1)
    assert bool(done.any())
    # Full steps give 3; the step that ends an episode gives what was left (1 to 3).
    assert bool((reward[~done] == 3).all())
    assert bool(((reward[done] >= 1) & (reward[done] <= 3)).all())
    elapsed = td["next", "elapsed_step"]
    assert bool((elapsed[~done] % 3 == 0).all())  # pool steps, three per PoolEnv step
    env.close()


@pytest.mark.parametrize("kwargs,match", [
    ({"num_workers": 4}, "num_workers=4 is not supported: use num_envs"),
    ({"backend": "gym"}, "backend='gym' is not supported"),
    ({"convert_actions_to_numpy": False}, "convert_actions_to_numpy=False"),
    ({"native_autoreset": True}, "native_autoreset=True"),
    ({"render_mode": "human"}, "render_mode='human' is not supported"),
    ({"batch_size": [3]}, r"batch_size=\[3\] does not match the env's \[\]"),
    ({"frame_skip": 0}, "frame_skip must be an int >= 1, got 0"),
    ({"frame_skip": 1.5}, "frame_skip must be an int >= 1, got 1.5"),
])
def test_unsupported_gymenv_arguments_are_refused_by_name(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PoolEnv("CartPole-v1", **kwargs)


def test_accepted_gymenv_arguments_and_pickling() -> None:
    env = PoolEnv("CartPole-v1", disable_env_checker=True, num_workers=1, backend="gymnasium",
                  render_mode="rgb_array", frame_skip=2, allow_done_after_reset=True)
    copy = pickle.loads(pickle.dumps(env))
    assert copy.frame_skip == 2 and _face(copy) == _face(env)
    env.close()
    copy.close()


@pytest.mark.skipif("HalfCheetah-v5" not in list_envs(), reason="MuJoCo not built")
def test_mujoco_frame_skip_repeats_and_env_options_reach_the_physics() -> None:
    """GymEnv's frame_skip on MuJoCo repeats the action; the physics' own is env_options."""
    rep = PoolEnv("HalfCheetah-v5", frame_skip=2, seed=0)
    phys = PoolEnv("HalfCheetah-v5", env_options={"frame_skip": 10}, seed=0)
    assert rep.frame_skip == 2 and phys.frame_skip == 1
    assert phys.pool.options["frame_skip"] == 10
    rep.close()
    phys.close()


@pytest.mark.skipif(not HAS_ATARI, reason="Atari not built")
def test_torchrl_atari_script_with_poolenv() -> None:
    """TorchRL's sota ``ppo/utils_atari.py`` env, GymEnv renamed to PoolEnv."""
    from torchrl.envs import (
        CatFrames,
        DoubleToFloat,
        EndOfLifeTransform,
        GrayScale,
        NoopResetEnv,
        RewardSum,
        StepCounter,
        ToTensorImage,
        TransformedEnv,
    )

    def make_base_env(env_name: str = "ALE/Pong-v5", frame_skip: int = 4) -> TransformedEnv:
        env = PoolEnv(env_name, frame_skip=frame_skip, from_pixels=True, pixels_only=False,
                      device="cpu", categorical_action_encoding=True)
        env = TransformedEnv(env)
        env.append_transform(NoopResetEnv(noops=30, random=True))
        env.append_transform(EndOfLifeTransform())
        return env

    env = make_base_env()
    env.append_transform(ToTensorImage())
    env.append_transform(GrayScale())
    # (the script's Resize(84, 84) needs torchvision, which the test extra does not install)
    env.append_transform(CatFrames(N=4, dim=-3))
    env.append_transform(RewardSum())
    env.append_transform(StepCounter(max_steps=4500))
    env.append_transform(DoubleToFloat())
    td = env.rollout(40)
    assert td["pixels"].shape == (40, 4, 210, 160) and td["pixels"].dtype == torch.float32
    assert td["next", "episode_reward"].shape == (40, 1)
    assert "end-of-life" in td["next"].keys()
    env.close()


@pytest.mark.skipif("HalfCheetah-v5" not in list_envs(), reason="MuJoCo not built")
def test_mujoco_pixels_as_gymenv_gives_them() -> None:
    """``from_pixels=True`` on HalfCheetah: uint8 ``[H, W, 3]`` frames of the env's state,
    the terminal frame under ``"next"`` and the new episode's first frame after a reset."""
    from torchfrag.envs import make

    env = PoolEnv("HalfCheetah-v5", 2, from_pixels=True, pixels_only=False, seed=0,
                  info_keys=[], max_episode_steps=3)
    assert env.observation_spec["pixels"].shape == (2, 480, 480, 3)
    assert env.observation_spec["pixels"].dtype == torch.uint8
    td = env.rollout(4, break_when_any_done=False)
    assert td["pixels"].shape == (2, 4, 480, 480, 3)
    # The same frames as the pool's render() of the same states (a second pool, same seed).
    ref = make("HalfCheetah-v5", num_envs=2, seed=0, autoreset="same_step", max_episode_steps=3)
    ref.keep_final_frames(0)
    ref.reset()
    torch.testing.assert_close(td["pixels"][0, 0], torch.from_numpy(ref.render(0).copy()))
    for t in range(3):
        ref.step(td["action"][:, t].numpy())
    assert bool(td["next", "done"][:, 2].all())  # the 3-step limit
    torch.testing.assert_close(td["next", "pixels"][0, 2], torch.from_numpy(ref.render(0, True).copy()))
    torch.testing.assert_close(td["pixels"][0, 3], torch.from_numpy(ref.render(0).copy()))
    assert not torch.equal(td["pixels"][0, 3], td["next", "pixels"][0, 2])
    ref.close()
    only = PoolEnv("HalfCheetah-v5", from_pixels=True)  # pixels_only=True: GymEnv's default
    assert list(only.observation_spec.keys()) == ["pixels"]
    assert only.rollout(2)["next", "pixels"].shape == (2, 480, 480, 3)
    only.close()
    env.close()


@pytest.mark.parametrize("args,kwargs", [
    (("CartPole-v1", 3), {"frame_skip": 2}),
    (("CartPole-v1", 2), {"from_pixels": True, "pixels_only": False}),
] + ([(("ALE/Pong-v5", 2), {})] if HAS_ATARI else []))
def test_new_faces_pass_check_env_specs_and_pickle(args: tuple, kwargs: dict) -> None:
    from torchrl.envs.utils import check_env_specs

    if kwargs.get("from_pixels"):
        pytest.importorskip("pygame")
    env = PoolEnv(*args, **kwargs)
    check_env_specs(env)
    copy = pickle.loads(pickle.dumps(env))
    check_env_specs(copy)
    env.close()
    copy.close()


def test_num_threads_among_env_options_sets_the_pools_threads() -> None:
    # PPOFactory(env_options={"num_threads": 1}) and the benchmarks pass it so, as make() takes it.
    env = PoolEnv("CartPole-v1", num_envs=4, env_options={"num_threads": 1})
    try:
        assert env._pool.num_threads == 1
    finally:
        env.close()
