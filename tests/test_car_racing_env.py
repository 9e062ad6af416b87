"""CarRacing-v3 (and CarRacing-v2) as pool envs, against Gymnasium 1.4's car_racing.py.

The pool seeds each env's NumPy-PCG64 stream at every reset from its per-env
generator (``tests/_pool_rng.PoolRng`` replays that generator), so Gymnasium's
``reset(seed=...)`` with the same values builds the same tracks. Rewards,
terminations and truncations must then be equal step for step over whole
episodes (the physics is bit-identical, see test_car_racing.py), and the 96x96
picture close: our software rasterizer is not pygame (fill rules, gfxdraw's
anti-aliased outlines, integer vertices, 4x4 samples per pixel against
smoothscale's area average over the 1000x800 screen, seven-segment score
digits instead of pygame's font), so pixels are compared statistically.

Measured (Gymnasium 1.4.0, pygame 2.6.1; one env, whole episodes plus the next
episode's first 100 frames, seeds 7, 1 and 2): continuous (random steering, gas-heavy;
all three run into the 1000-step limit): mean absolute difference 0.31-0.48 per
channel, 99.1% of pixels within 16 of Gymnasium's on every channel, worst frame
98.4%; discrete (seed 7, the one tested, leaves the playfield at step 746: -100 and
terminated): 0.30-0.47 per channel, 99.3%, worst frame 98.2%. Most of the rest
is edges (a 4x4 sample grid quantises coverage to 1/16) and the score digits.
The bars below leave room for other seeds.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
gymnasium = pytest.importorskip("gymnasium")
pytest.importorskip("Box2D")
pytest.importorskip("pygame")

from _pool_rng import PoolRng  # noqa: E402

from torchfrag.envs import list_envs, make, spec  # noqa: E402
from torchfrag.envs.pool import per_env_seeds  # noqa: E402

TOLERANCE = 16  # per channel, out of 255


class _Reference:
    """Gymnasium's CarRacing-v3 seeded as the pool seeds env `index` of a pool seeded `seed`."""

    def __init__(self, seed: int, index: int, num_envs: int, **kwargs) -> None:
        self.env = gymnasium.make("CarRacing-v3", **kwargs)
        self.seeds = PoolRng(per_env_seeds(seed, num_envs)[index])

    def reset(self) -> np.ndarray:
        return self.env.reset(seed=self.seeds._next())[0]


def _pixel_stats(ours: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, float]:
    diff = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
    return diff.mean(axis=(0, 1)), float((diff.max(axis=2) <= TOLERANCE).mean())


def _action(rng: np.random.Generator, continuous: bool):
    if continuous:  # gas-heavy: the car reaches speed and, sooner or later, the edge
        return np.array([rng.uniform(-1, 1), rng.uniform(0.3, 1), rng.uniform(0, 0.1)], np.float32)
    return int(rng.choice(5, p=[0.1, 0.2, 0.2, 0.45, 0.05]))


def _episodes(env_id: str, options: dict, steps: int, seed: int = 7):
    """Steps one pool env and its reference; yields (ours, ref) frames after checking
    reward, terminated and truncated for equality at every step."""
    continuous = options.get("continuous", True)
    pool = make(env_id, num_envs=1, seed=seed, **options)
    ref = _Reference(seed, 0, 1, **options)
    obs, _ = pool.reset()
    ref_obs = ref.reset()
    yield obs[0], ref_obs, None
    rng = np.random.default_rng(seed)
    for t in range(steps):
        a = _action(rng, continuous)
        obs, reward, terminated, truncated, _ = pool.step(np.array([a]))
        r_obs, r_rew, r_term, r_trunc, _ = ref.env.step(a)
        where = f"{env_id} {options} step {t}"
        assert reward[0] == r_rew, (where, reward[0], r_rew)
        assert (bool(terminated[0]), bool(truncated[0])) == (r_term, r_trunc), where
        yield obs[0], r_obs, (r_rew, r_term, r_trunc)
        if r_term or r_trunc:
            # The pool resets on the next step (next-step auto-reset); so does the reference.
            obs, reward, terminated, truncated, _ = pool.step(np.array([a]))
            r_obs = ref.reset()
            assert reward[0] == 0.0 and not terminated[0] and not truncated[0]
            yield obs[0], r_obs, None
    pool.close()


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "discrete"])
def test_whole_episodes_match_gymnasium(continuous: bool) -> None:
    """Rewards and ends bit for bit, pictures within the measured bounds, over one episode
    ending in the playfield's edge (-100) or the time limit, and the next one's start."""
    means, fractions, ends = [], [], []
    for ours, ref, step in _episodes("CarRacing-v3", {"continuous": continuous}, steps=1100):
        mean, frac = _pixel_stats(ours, ref)
        means.append(mean)
        fractions.append(frac)
        if step is not None and (step[1] or step[2]):
            ends.append(step)
    assert ends, "no episode ended"
    mean = np.mean(means, axis=0)
    assert (mean < 1.0).all(), mean
    assert np.mean(fractions) > 0.985, np.mean(fractions)
    assert min(fractions) > 0.96, min(fractions)


def test_domain_randomize_colours_match_gymnasium() -> None:
    """Road, background and grass colours drawn at each reset as Gymnasium draws them."""
    fractions = []
    for ours, ref, _ in _episodes("CarRacing-v3", {"domain_randomize": True}, steps=60):
        mean, frac = _pixel_stats(ours, ref)
        fractions.append(frac)
        assert (mean < 2.0).all(), mean
    assert np.mean(fractions) > 0.985, np.mean(fractions)


@pytest.mark.parametrize("env_id,ended", [("CarRacing-v3", "terminated"),
                                          ("CarRacing-v2", "truncated")])
def test_lap_completion_ends_the_episode(env_id: str, ended: str) -> None:
    """With lap_complete_percent=0 the start tile completes a lap at the first step:
    v3 terminates (Gymnasium 1.x), v2 truncates (Gymnasium 0.29's v2)."""
    with make(env_id, num_envs=1, seed=0, lap_complete_percent=0.0) as pool:
        pool.reset()
        _, reward, terminated, truncated, _ = pool.step(np.zeros((1, 3), np.float32))
    assert {"terminated": terminated[0], "truncated": truncated[0]}[ended]
    assert not {"terminated": truncated[0], "truncated": terminated[0]}[ended]
    ref = _Reference(0, 0, 1, lap_complete_percent=0.0)
    ref.reset()
    _, r_rew, r_term, *_ = ref.env.step(np.zeros(3, np.float32))
    assert r_term and reward[0] == r_rew


def test_spaces_and_faces_match_gymnasium() -> None:
    from torchrl.envs.utils import check_env_specs

    import torchfrag.envs  # noqa: F401 - registers torchfrag/<EnvId>
    from torchfrag.envs import PoolEnv

    for continuous in (True, False):
        ref = gymnasium.make("CarRacing-v3", continuous=continuous)
        ours = spec("CarRacing-v3", continuous=continuous)
        assert ours.observation_space == ref.observation_space
        assert ours.action_space == ref.action_space
        assert ours.max_episode_steps == ref.spec.max_episode_steps == 1000
        assert ours.reward_threshold == ref.spec.reward_threshold
    assert {"CarRacing-v2", "CarRacing-v3"} <= set(list_envs())
    single = gymnasium.make("torchfrag/CarRacing-v3", continuous=False)
    obs, _ = single.reset(seed=0)
    assert obs.shape == (96, 96, 3) and obs.dtype == np.uint8
    single.close()
    envs = gymnasium.make_vec("torchfrag/CarRacing-v3", num_envs=2,
                              vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    obs, reward, *_ = envs.step(envs.action_space.sample())
    assert obs.shape == (2, 96, 96, 3) and reward.shape == (2,)
    envs.close()
    env = PoolEnv("CarRacing-v3", num_envs=2, seed=1)
    check_env_specs(env, seed=0)
    assert env.rollout(3)["next", "reward"].shape == (2, 3, 1)
    env.close()


@pytest.mark.parametrize("options,match", [
    ({"lap_complete_percent": 1.5}, "lap_complete_percent"),
    ({"lap_complete_percent": -0.1}, "lap_complete_percent"),
    ({"continuous": "yes"}, "continuous"),
    ({"domain_randomize": 2}, "domain_randomize"),
    ({"hardcore": True}, "hardcore"),
    ({"frame_skip": 0}, "frame_skip"),
    ({"frame_skip": 2.5}, "frame_skip"),
])
def test_bad_options_are_refused(options: dict, match: str) -> None:
    with pytest.raises((ValueError, TypeError, KeyError), match=match):
        make("CarRacing-v3", num_envs=1, **options)


@pytest.mark.parametrize("env_id", ["CarRacing-v3", "CarRacing-v2"])
def test_frame_skip_repeats_the_action_and_sums_the_rewards(env_id: str) -> None:
    """frame_skip=4 is four frame_skip=1 steps with the same action: the same picture after the
    fourth and the four rewards summed; an episode that ends inside the repeat ends there (a
    lap that completes at the first frame, as test_lap_completion_ends_the_episode makes it)."""
    rng = np.random.default_rng(3)
    skip = 4
    with make(env_id, num_envs=1, seed=5) as one, \
            make(env_id, num_envs=1, seed=5, frame_skip=skip) as four:
        np.testing.assert_array_equal(one.reset()[0], four.reset()[0])
        for _ in range(60):
            action = _action(rng, True)[None]
            total = 0.0
            for _ in range(skip):
                obs1, rew1, term1, trunc1, _ = one.step(action)
                total += float(rew1[0])
            obs4, rew4, term4, trunc4, _ = four.step(action)
            assert not (term1[0] or trunc1[0] or term4[0] or trunc4[0])
            assert rew4[0] == pytest.approx(total, rel=1e-9, abs=1e-9)
            np.testing.assert_array_equal(obs4, obs1)
    with make(env_id, num_envs=1, seed=0, lap_complete_percent=0.0) as one, \
            make(env_id, num_envs=1, seed=0, lap_complete_percent=0.0, frame_skip=skip) as four:
        one.reset(), four.reset()
        action = np.zeros((1, 3), np.float32)
        obs1, *ends1, _ = one.step(action)
        obs4, *ends4, _ = four.step(action)
    np.testing.assert_array_equal(obs4, obs1)
    assert [e[0] for e in ends4] == [e[0] for e in ends1] and (ends4[1][0] or ends4[2][0])
    assert spec(env_id).options["frame_skip"].default == 1


def test_bad_actions_are_refused() -> None:
    with make("CarRacing-v3", num_envs=1, continuous=False) as pool:
        pool.reset()
        with pytest.raises(ValueError, match="action"):
            pool.step(np.array([5]))
    with make("CarRacing-v3", num_envs=1) as pool:
        pool.reset()
        with pytest.raises(ValueError):
            pool.step(np.array([[0.0, np.nan, 0.0]], dtype=np.float32))


@pytest.mark.parametrize("continuous", [False, True], ids=["preset", "continuous"])
def test_ppo_preset_composes_and_runs_from_the_cli(tmp_path, continuous: bool) -> None:
    """conf/algo_env/ppo_CarRacing-v3.yaml: PPO from pixels (Nature-CNN torso; a categorical head
    over the preset's 5 discrete actions, or a TanhNormal one with continuous=true) composes for
    env=CarRacing-v3 with its env options (4 frames per action, 250 actions per episode) and runs
    a few iterations with evaluation (episodes cut to 40 actions so the smoke run stays short)."""
    import json

    from _cli import run_cli

    from torchfrag.train import compose_config

    cfg = compose_config(["env=CarRacing-v3"])
    algo = cfg.algo
    assert (algo.name, algo.steps, algo.lr, algo.gamma) == ("ppo", 128, 2.5e-4, 0.99)
    assert dict(cfg.env.options) == {"continuous": False, "frame_skip": 4, "max_episode_steps": 250}
    run_dir = tmp_path / "run"
    proc = run_cli(["env=CarRacing-v3", "algo.num_envs=2", "algo.steps=16", "algo.epochs=1",
                    "algo.minibatch_size=16", "algo.total_frames=96", "env.options.max_episode_steps=40",
                    f"env.options.continuous={str(continuous).lower()}", "eval_episodes=1",
                    "progress=false", "plot=false", f"hydra.run.dir={run_dir}"], cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env"] == "CarRacing-v3" and summary["frames"] == 96
    assert len(summary["eval_returns"]) == 1 and np.isfinite(summary["eval_returns"][0])
