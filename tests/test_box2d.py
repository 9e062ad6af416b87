"""Box2D envs against Gymnasium 1.4 on the ``box2d`` 2.3.10 wheel.

Gymnasium draws the terrain, the initial push and the engines' dispersion
from its ``np_random``; the pool draws the same quantities, in the same order
and with the same formulas, from its per-env xoshiro256++ stream.  The
reference here gets an ``np_random`` that replays that stream
(``tests/_pool_rng.PoolRng``), so both sides see the same
random numbers and every observation, reward and termination must be equal
bit for bit over whole episodes.
"""
from __future__ import annotations

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")
pytest.importorskip("Box2D")

from _pool_rng import PoolRng  # noqa: E402
from gymnasium.envs.box2d import lunar_lander as gym_lunar  # noqa: E402

from torchfrag.envs import list_envs, make, spec  # noqa: E402
from torchfrag.envs.pool import per_env_seeds  # noqa: E402

BOX2D_IDS = ["LunarLander-v3", "LunarLanderContinuous-v3", "BipedalWalker-v3",
             "BipedalWalkerHardcore-v3"]
def _reference(env_id: str, seed: int, **kwargs):
    ref = gymnasium.make(env_id, **kwargs)
    ref.unwrapped._np_random = PoolRng(seed)
    return ref


def _policy(kind: str, rng: np.random.Generator, ref, obs: np.ndarray, continuous: bool):
    """The heuristic lander (lands and sleeps: +100) with noise, or random actions."""
    if kind == "walker":
        # Beyond the bounds as well: both sides clip; exact zeros stop a motor.
        a = rng.uniform(-1.3, 1.3, size=4).astype(np.float32)
        a[rng.random(4) < 0.05] = 0.0
        return a
    if kind == "heuristic" and rng.random() > 0.2:
        action = gym_lunar.heuristic(ref.unwrapped, obs)
        return np.asarray(action, dtype=np.float32) if continuous else int(action)
    if continuous:
        # Beyond the bounds as well: both sides clip.
        return rng.uniform(-1.3, 1.3, size=2).astype(np.float32)
    return int(rng.integers(0, 4))


def _frame_without_flames(ours: np.ndarray, ref, where: str) -> float:
    """Asserts ``ours`` is the reference's frame without its flame particles.

    Then draws the reference's own frame (which ages its particles, as every
    Gymnasium ``render()`` call does) and returns the share of pixels in which
    the two differ: the flames the pool does not simulate. BipedalWalker has
    none: its frame must be the reference's own (one ``render()`` call).
    """
    env = ref.unwrapped
    if not hasattr(env, "particles"):
        np.testing.assert_array_equal(ours, env.render(), err_msg=where)
        return 0.0
    particles, env.particles = env.particles, []
    try:
        np.testing.assert_array_equal(ours, env.render(), err_msg=where)
    finally:
        env.particles = particles
    return float(np.mean(np.any(ours != env.render(), axis=-1)))


def _align(env_id: str, options: dict, kind: str, num_envs: int, steps: int,
           seed: int = 7, frames: list[float] | None = None) -> dict:
    """Steps the pool and one replaying reference per env; returns episode outcomes seen.

    ``frames``: also compares ``pool.render(i)`` with the reference's frame
    after every reset and step, appending the share of pixels the flames
    change (see :func:`_frame_without_flames`).
    """
    continuous = isinstance(spec(env_id, **options).action_space, gymnasium.spaces.Box)
    pool = make(env_id, num_envs=num_envs, seed=seed, **options)
    drawing = {} if frames is None else {"render_mode": "rgb_array"}
    refs = [_reference(env_id, s, **options, **drawing) for s in per_env_seeds(seed, num_envs)]
    obs, _ = pool.reset()
    ref_obs = [ref.reset()[0] for ref in refs]
    for i in range(num_envs):
        np.testing.assert_array_equal(obs[i], ref_obs[i], err_msg=f"{env_id} env {i} reset")
        if frames is not None:
            frames.append(_frame_without_flames(pool.render(i), refs[i], f"{env_id} env {i}"))
    rng = np.random.default_rng(seed)
    needs_reset = [False] * num_envs
    outcomes = {"landed": 0, "crashed": 0, "truncated": 0, "steps": 0}
    for t in range(steps):
        actions = [_policy(kind, rng, refs[i], ref_obs[i], continuous) for i in range(num_envs)]
        obs, reward, terminated, truncated, _ = pool.step(np.stack(actions))
        for i, ref in enumerate(refs):
            where = f"{env_id} {options} env {i} step {t}"
            if needs_reset[i]:
                ref_obs[i], _ = ref.reset()
                r_rew, r_term, r_trunc = 0.0, False, False
                needs_reset[i] = False
            else:
                ref_obs[i], r_rew, r_term, r_trunc, _ = ref.step(actions[i])
                outcomes["steps"] += 1
                if r_term:
                    outcomes["landed" if r_rew == 100 else "crashed"] += 1
                outcomes["truncated"] += int(r_trunc)
                needs_reset[i] = r_term or r_trunc
            np.testing.assert_array_equal(obs[i], ref_obs[i], err_msg=where)
            assert reward[i] == r_rew, (where, reward[i], r_rew)
            assert (bool(terminated[i]), bool(truncated[i])) == (r_term, r_trunc), where
            if frames is not None:
                frames.append(_frame_without_flames(pool.render(i), ref, where))
    pool.close()
    return outcomes


@pytest.mark.parametrize("env_id,options,kind", [
    ("LunarLander-v3", {}, "heuristic"),
    ("LunarLander-v3", {}, "random"),
    ("LunarLanderContinuous-v3", {}, "heuristic"),
    ("LunarLanderContinuous-v3", {}, "random"),
    ("LunarLander-v3", {"enable_wind": True, "wind_power": 10.0, "turbulence_power": 1.0,
                        "gravity": -9.0}, "heuristic"),
    ("LunarLander-v3", {"continuous": True}, "heuristic"),
])
def test_lunar_lander_matches_gymnasium_bit_for_bit(env_id: str, options: dict, kind: str) -> None:
    outcomes = _align(env_id, options, kind, num_envs=3, steps=700)
    # Whole episodes were compared, not a prefix of one (the continuous
    # heuristic hovers for long before it lands).
    assert outcomes["crashed"] + outcomes["landed"] >= (3 if kind == "random" else 1), outcomes
    if kind == "heuristic" and not options.get("enable_wind"):
        assert outcomes["landed"] >= 1, outcomes


@pytest.mark.parametrize("env_id,kind", [("LunarLander-v3", "random"),
                                         ("LunarLanderContinuous-v3", "random")])
def test_lunar_lander_frames_equal_gymnasiums_but_the_flames(env_id: str, kind: str) -> None:
    """render() over whole episodes: Gymnasium's frame with its flame particles hidden.

    Gymnasium's flames are bodies of its world made only under a render mode;
    the pool does not simulate them (the physics is the same without). With
    them drawn, the frames differ in the flames' pixels alone.
    """
    pytest.importorskip("pygame")
    diffs: list[float] = []
    outcomes = _align(env_id, {}, kind, num_envs=2, steps=150, frames=diffs)
    assert outcomes["crashed"] + outcomes["landed"] >= 2, outcomes
    assert len(diffs) == 2 * 151
    shown = np.array(diffs) > 0  # measured: in ~98% of frames, at most 0.09% of the pixels
    assert shown.mean() > 0.5 and max(diffs) < 0.002, (shown.mean(), max(diffs))


@pytest.mark.parametrize("env_id", ["BipedalWalker-v3", "BipedalWalkerHardcore-v3"])
def test_bipedal_walker_frames_equal_gymnasiums(env_id: str) -> None:
    """render() over whole episodes: terrain, stumps/stairs/pits, clouds, lidar ray, scroll."""
    pytest.importorskip("pygame")
    frames: list[float] = []
    outcomes = _align(env_id, {}, "walker", num_envs=2, steps=150, frames=frames)
    # An episode ended and the next was drawn (Gymnasium's lidar animation restarts).
    assert outcomes["crashed"] >= 1 and len(frames) == 2 * 151, outcomes


def test_frames_through_gymnasium_and_pool_env() -> None:
    pytest.importorskip("pygame")
    from torchfrag.envs import PoolEnv

    env = gymnasium.make("torchfrag/BipedalWalker-v3", render_mode="rgb_array")
    env.reset(seed=0)
    env.step(np.zeros(4, dtype=np.float32))
    assert env.render().shape == (400, 600, 3) and env.metadata["render_fps"] == 50
    env.close()
    vec = gymnasium.make_vec("torchfrag/LunarLander-v3", num_envs=2, render_mode="rgb_array")
    vec.reset(seed=0)
    shown = vec.render()
    assert len(shown) == 2 and not np.array_equal(shown[0], shown[1])  # two terrains
    vec.close()
    pool_env = PoolEnv("LunarLanderContinuous-v3", num_envs=2, seed=0)
    pool_env.reset()
    assert pool_env.render(None).shape == (2, 400, 600, 3)
    pool_env.close()


@pytest.mark.parametrize("env_id,options", [
    ("BipedalWalker-v3", {}),
    ("BipedalWalkerHardcore-v3", {}),
    ("BipedalWalker-v3", {"hardcore": True}),
])
def test_bipedal_walker_matches_gymnasium_bit_for_bit(env_id: str, options: dict) -> None:
    # Random torques topple the walker: many whole episodes, each on a new
    # terrain in a world that keeps the previous episodes' history.
    outcomes = _align(env_id, options, "walker", num_envs=3, steps=400)
    assert outcomes["crashed"] >= 3, outcomes


@pytest.mark.parametrize("env_id,kind,seed", [
    ("LunarLander-v3", "random", 123),
    ("LunarLanderContinuous-v3", "heuristic", 2024),
    ("BipedalWalker-v3", "walker", 99),
])
def test_patched_engine_matches_gymnasium_on_more_seeds(env_id: str, kind: str, seed: int) -> None:
    """The speed patches (build_tools/_box2d_patches.py) keep every bit on other seeds too:
    the legs rest on their joint limits (the patched branch) through most of these steps."""
    outcomes = _align(env_id, {}, kind, num_envs=2, steps=400, seed=seed)
    if kind != "walker":  # whole lander episodes, not a prefix of one
        assert outcomes["crashed"] + outcomes["landed"] >= 1, outcomes


def test_hardcore_terrain_matches_gymnasium_on_many_seeds() -> None:
    """Stumps, stairs and pits: the first observation's lidar sees the terrain."""
    seeds = list(range(40))
    with make("BipedalWalkerHardcore-v3", num_envs=len(seeds), seed=seeds) as pool:
        obs, _ = pool.reset()
    for i, s in enumerate(seeds):
        ref = _reference("BipedalWalkerHardcore-v3", s)
        np.testing.assert_array_equal(obs[i], ref.reset()[0], err_msg=f"seed {s}")
        kinds = len(ref.unwrapped.terrain) - (200 - 1)  # obstacle bodies besides the edges
        assert kinds > 0, f"seed {s}: no obstacles"


@pytest.mark.parametrize("env_id", BOX2D_IDS)
def test_spec_is_gymnasiums(env_id: str) -> None:
    ref = gymnasium.make(env_id)
    ours = spec(env_id)
    assert env_id in list_envs()
    assert ours.observation_space == ref.observation_space
    assert ours.action_space == ref.action_space
    assert ours.max_episode_steps == ref.spec.max_episode_steps
    assert ours.reward_threshold == ref.spec.reward_threshold


@pytest.mark.parametrize("env_id", BOX2D_IDS)
def test_every_face_builds_the_env(env_id: str) -> None:
    """Gymnasium make_vec and TorchRL's PoolEnv (check_env_specs) over the same pool."""
    from torchrl.envs.utils import check_env_specs

    import torchfrag.envs  # noqa: F401 - registers torchfrag/<EnvId>
    from torchfrag.envs import PoolEnv

    envs = gymnasium.make_vec(f"torchfrag/{env_id}", num_envs=3,
                              vectorization_mode="vector_entry_point")
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (3, *spec(env_id).observation_space.shape)
    obs, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
    assert obs.dtype == np.float32 and reward.shape == (3,)
    envs.close()
    env = PoolEnv(env_id, num_envs=2, seed=1)
    check_env_specs(env, seed=0)
    assert env.rollout(5)["next", "reward"].shape == (2, 5, 1)
    env.close()


def test_continuous_option_switches_the_action_space() -> None:
    assert spec("LunarLander-v3", continuous=True).action_space == spec(
        "LunarLanderContinuous-v3").action_space
    assert spec("LunarLanderContinuous-v3", continuous=False).action_space.n == 4


def _rows(obs: np.ndarray, reward: np.ndarray) -> np.ndarray:
    """Observation and reward of each env as one float64 row."""
    flat = obs.reshape(len(obs), -1).astype(np.float64)
    return np.concatenate([flat, np.asarray(reward, np.float64)[:, None]], 1)


@pytest.mark.parametrize("env_id", [*BOX2D_IDS, "CarRacing-v3"])
def test_same_trajectories_whatever_the_threads_and_async_order(env_id: str) -> None:
    num_envs, steps = 6, 150
    rng = np.random.default_rng(1)
    space = spec(env_id).action_space
    if isinstance(space, gymnasium.spaces.Discrete):
        actions = rng.integers(0, space.n, size=(steps, num_envs))
    else:
        actions = rng.uniform(-1, 1, size=(steps, num_envs, *space.shape)).astype(np.float32)

    def sync_run(threads: int) -> np.ndarray:
        with make(env_id, num_envs=num_envs, num_threads=threads, seed=5) as pool:
            obs, _ = pool.reset()
            rows = [_rows(obs, np.zeros(num_envs))]
            for a in actions:
                obs, rew, *_ = pool.step(a)
                rows.append(_rows(obs, rew))
        return np.stack(rows)

    one = sync_run(1)
    np.testing.assert_array_equal(one, sync_run(2))
    # Batches of 2 of 6 envs, in whatever order the threads finish them.
    seen: dict[int, list[np.ndarray]] = {i: [] for i in range(num_envs)}
    with make(env_id, num_envs=num_envs, batch_size=2, num_threads=2, seed=5) as pool:
        pool.async_reset()
        while min(len(v) for v in seen.values()) <= steps:
            obs, rew, _, _, info = pool.recv()
            ids = [int(i) for i in info["env_id"]]
            for row, i in enumerate(ids):
                if len(seen[i]) <= steps:
                    seen[i].append(_rows(obs[row:row + 1], rew[row:row + 1] if seen[i] else [0.0])[0])
            pool.send(np.stack([actions[min(len(seen[i]) - 1, steps - 1), i] for i in ids]),
                      np.array(ids))
    for i in range(num_envs):
        np.testing.assert_array_equal(np.stack(seen[i]), one[:, i], err_msg=f"env {i}")


@pytest.mark.parametrize("env_id", ["LunarLander-v3", "CarRacing-v3"])
def test_seeds_change_the_terrain_and_push(env_id: str) -> None:
    """Same seed, same terrain and push (CarRacing: track and picture); another seed, others."""
    with make(env_id, num_envs=2, seed=[3, 3]) as same:
        a = same.reset()[0]
    assert np.array_equal(a[0], a[1])
    with make(env_id, num_envs=2, seed=[3, 4]) as other:
        b = other.reset()[0]
    assert not np.array_equal(b[0], b[1])


@pytest.mark.parametrize("options,match", [
    ({"gravity": 0.0}, "gravity"),
    ({"gravity": -12.0}, "gravity"),
    ({"gravity": 3.0}, "gravity"),
    ({"hardcore": True}, "hardcore"),
    ({"continuous": "yes"}, "continuous"),
])
def test_bad_options_are_refused(options: dict, match: str) -> None:
    with pytest.raises((ValueError, TypeError, KeyError), match=match):
        make("LunarLander-v3", num_envs=1, **options)


def test_walker_refuses_options_it_does_not_have() -> None:
    with pytest.raises((ValueError, KeyError), match="continuous"):
        make("BipedalWalker-v3", num_envs=1, continuous=True)


def test_bad_actions_are_refused() -> None:
    with make("LunarLander-v3", num_envs=2) as pool:
        pool.reset()
        with pytest.raises(ValueError, match="action"):
            pool.step(np.array([0, 4]))
    with make("LunarLanderContinuous-v3", num_envs=2) as pool:
        pool.reset()
        with pytest.raises(ValueError):
            pool.step(np.array([[0.0, np.nan], [0.0, 0.0]], dtype=np.float32))


@pytest.mark.slow
def test_ppo_preset_learns_lunar_lander(tmp_path) -> None:
    """The CLI's PPO preset for LunarLander-v3 (conf/algo_env) lifts training returns from a
    random lander's (about -180) to well above it in 131k frames (~20 s on a quiet 2-core host)."""
    import csv
    import os
    import subprocess
    import sys

    import torchfrag

    env = dict(os.environ, OMP_NUM_THREADS="1")
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(torchfrag.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, env.get("PYTHONPATH", "")])
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "torchfrag.train", "env=LunarLander-v3", "algo.total_frames=131072",
         "eval_episodes=1", "progress=false", "plot=false", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(run_dir / "train" / "scalars" / "train" / "episode_return.csv") as f:
        returns = [float(row[1]) for row in csv.reader(f)]
    first, last = np.mean(returns[:3]), np.mean(returns[-5:])
    assert first < -100, returns[:3]
    assert last > -20, f"training returns went from {first:.1f} to {last:.1f}"


def test_build_tool_extracts_the_engine_with_a_throwing_assert(tmp_path, monkeypatch) -> None:
    """build_tools/box2d.py: the engine comes from the checked sdist, b2Assert no longer touches
    Python (it runs on worker threads without the GIL), and a tarball with another hash is refused."""
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, root)
    try:
        from build_tools import box2d as build_box2d
    finally:
        sys.path.remove(root)
    cached = os.path.join(root, "build", "native", "box2d",
                          f"Box2D-{build_box2d.BOX2D_SDIST_VERSION}.tar.gz")
    if not os.path.isfile(cached):
        pytest.skip("no cached Box2D sdist (the extension was built elsewhere)")
    monkeypatch.setenv("TORCHFRAG_BOX2D_SDIST", cached)
    src = build_box2d.source_root(str(tmp_path / "a"))
    with open(os.path.join(src, "Box2D", "Common", "b2Settings.h"), encoding="latin-1") as f:
        settings = f.read()
    assert "std::logic_error" in settings and "PyErr_SetString" not in settings
    for patch in build_box2d._box2d_patches.PATCHES:
        with open(os.path.join(src, patch.path), encoding="latin-1") as f:
            text = f.read()
        assert patch.new in text and patch.old not in text, patch.path
    # A source that no longer holds a patch's original text stops the build.
    with pytest.raises(SystemExit, match="occurs 0 times"):
        build_box2d._box2d_patches.apply(patch.path, "another version's text")
    assert len(build_box2d.ext_args(str(tmp_path / "a"))["sources"]) > 40
    bad = tmp_path / "Box2D-bad.tar.gz"
    bad.write_bytes(b"not the sdist")
    monkeypatch.setenv("TORCHFRAG_BOX2D_SDIST", str(bad))
    with pytest.raises(SystemExit, match="SHA-256"):
        build_box2d.source_root(str(tmp_path / "b"))
