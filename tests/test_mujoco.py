"""MuJoCo v5 tasks of the C++ pool: alignment with Gymnasium, determinism, bad input.

Alignment: after every reset, the Gymnasium reference is synced to our
initial state (``info["qpos0"]``/``info["qvel0"]``) with ``set_state``; both
are then stepped with the same float64 actions (partly outside the action
bounds, which MuJoCo clamps) until the episode ends.  Observations, rewards,
``terminated``/``truncated`` and every info entry must agree within 1e-6.
"""
from __future__ import annotations


import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

from _pool_rng import PoolRng  # noqa: E402

from torchfrag.envs import make, spec  # noqa: E402

TASKS = [
    "Ant-v5",
    "HalfCheetah-v5",
    "Hopper-v5",
    "Humanoid-v5",
    "HumanoidStandup-v5",
    "InvertedDoublePendulum-v5",
    "InvertedPendulum-v5",
    "Pusher-v5",
    "Reacher-v5",
    "Swimmer-v5",
    "Walker2d-v5",
]
TOL = 1e-6
OUR_INFOS = {"qpos0", "qvel0", "env_id", "elapsed_step"}


@pytest.fixture(autouse=True)
def _scratch_cwd(tmp_path, monkeypatch) -> None:
    """Gymnasium's reference (the mujoco Python package) appends MuJoCo's
    compile warnings to MUJOCO_LOG.TXT in the working directory: keep that
    file out of the repository."""
    monkeypatch.chdir(tmp_path)


def _close(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    np.testing.assert_allclose(np.asarray(ours, dtype=np.float64),
                               np.asarray(ref, dtype=np.float64), rtol=TOL, atol=TOL,
                               err_msg=what)


def _run_alignment(env_id: str, options: dict, gym_kwargs: dict, episode_steps: int,
                   total_steps: int, seed: int = 0) -> int:
    """Steps ours and Gymnasium's env side by side; returns the episodes run."""
    ours = make(env_id, num_envs=1, seed=seed, max_episode_steps=episode_steps, **options)
    ref = gymnasium.make(env_id, max_episode_steps=episode_steps, disable_env_checker=True,
                         **gym_kwargs)
    raw = ref.unwrapped
    assert ours.observation_space.shape == ref.observation_space.shape
    np.testing.assert_array_equal(ours.action_space.low, ref.action_space.low)
    np.testing.assert_array_equal(ours.action_space.high, ref.action_space.high)
    low = ref.action_space.low.astype(np.float64)
    high = ref.action_space.high.astype(np.float64)
    rng = np.random.default_rng(seed + 1)
    steps = episodes = 0
    try:
        while steps < total_steps:
            obs, info = ours.reset()
            _, ref_info = ref.reset(seed=int(rng.integers(1 << 31)))
            raw.set_state(info["qpos0"][0].copy(), info["qvel0"][0].copy())
            _close(obs[0], raw._get_obs(), f"{env_id} reset obs")
            for key in raw._get_reset_info():
                _close(info[key][0], raw._get_reset_info()[key], f"{env_id} reset info {key}")
            episodes += 1
            while True:
                # 20% beyond the bounds on each side: MuJoCo clamps ctrl.
                action = rng.uniform(low - 0.2 * (high - low), high + 0.2 * (high - low))
                obs, rew, term, trunc, info = ours.step(action[None])
                r_obs, r_rew, r_term, r_trunc, r_info = ref.step(action)
                steps += 1
                where = f"{env_id} step {steps} (episode {episodes})"
                _close(obs[0], r_obs, f"{where}: obs")
                _close(rew[0], r_rew, f"{where}: reward")
                assert bool(term[0]) == bool(r_term), f"{where}: terminated"
                assert bool(trunc[0]) == bool(r_trunc), f"{where}: truncated"
                assert [k for k in info if k not in OUR_INFOS] == list(r_info), \
                    f"{where}: info keys"
                for key, value in r_info.items():
                    _close(info[key][0], value, f"{where}: info {key}")
                if term[0] or trunc[0]:
                    break
    finally:
        ours.close()
        ref.close()
    return episodes


# Episode length caps keep CI fast; non-terminating tasks get several episodes.
EPISODE_STEPS = {"Reacher-v5": 50, "Pusher-v5": 100}


@pytest.mark.parametrize("env_id", TASKS)
def test_alignment_with_gymnasium(env_id: str) -> None:
    episodes = _run_alignment(env_id, {}, {}, EPISODE_STEPS.get(env_id, 120), 300)
    assert episodes >= 2


# Non-default options, each mapped to Gymnasium's constructor argument.
OPTION_CASES = [
    ("Ant-v5",
     dict(exclude_current_positions_from_observation=False,
          include_cfrc_ext_in_observation=False, healthy_z_min=0.3, healthy_z_max=0.9,
          contact_force_min=-0.5, contact_force_max=2.0, ctrl_cost_weight=0.1, main_body="torso",
          reset_noise_scale=0.2, frame_skip=3),
     dict(exclude_current_positions_from_observation=False,
          include_cfrc_ext_in_observation=False, healthy_z_range=(0.3, 0.9),
          contact_force_range=(-0.5, 2.0), ctrl_cost_weight=0.1, main_body="torso",
          reset_noise_scale=0.2, frame_skip=3)),
    ("Ant-v5", dict(main_body=2, terminate_when_unhealthy=False),
     dict(main_body=2, terminate_when_unhealthy=False)),
    ("Humanoid-v5",
     dict(include_cinert_in_observation=False, include_cvel_in_observation=False,
          include_qfrc_actuator_in_observation=True, include_cfrc_ext_in_observation=False,
          contact_cost_max=1e-3, healthy_z_min=0.9, forward_reward_weight=2.0),
     dict(include_cinert_in_observation=False, include_cvel_in_observation=False,
          include_qfrc_actuator_in_observation=True, include_cfrc_ext_in_observation=False,
          contact_cost_range=(-np.inf, 1e-3), healthy_z_range=(0.9, 2.0),
          forward_reward_weight=2.0)),
    ("HumanoidStandup-v5",
     dict(exclude_current_positions_from_observation=False, impact_cost_max=1e-4,
          ctrl_cost_weight=0.3),
     dict(exclude_current_positions_from_observation=False, impact_cost_range=(-np.inf, 1e-4),
          ctrl_cost_weight=0.3)),
    ("Hopper-v5",
     dict(healthy_state_min=-5.0, healthy_state_max=5.0, healthy_z_min=0.8,
          healthy_angle_min=-0.3, healthy_angle_max=0.3, healthy_reward=2.0,
          exclude_current_positions_from_observation=False),
     dict(healthy_state_range=(-5.0, 5.0), healthy_z_range=(0.8, float("inf")),
          healthy_angle_range=(-0.3, 0.3), healthy_reward=2.0,
          exclude_current_positions_from_observation=False)),
    ("Walker2d-v5", dict(xml_file="walker2d.xml", healthy_z_min=0.5, healthy_angle_max=1.5),
     dict(xml_file="walker2d.xml", healthy_z_range=(0.5, 2.0), healthy_angle_range=(-1.0, 1.5))),
    ("HalfCheetah-v5",
     dict(forward_reward_weight=0.5, exclude_current_positions_from_observation=False),
     dict(forward_reward_weight=0.5, exclude_current_positions_from_observation=False)),
    ("Swimmer-v5", dict(ctrl_cost_weight=0.1, exclude_current_positions_from_observation=False),
     dict(ctrl_cost_weight=0.1, exclude_current_positions_from_observation=False)),
    ("InvertedDoublePendulum-v5", dict(healthy_reward=3.0, reset_noise_scale=0.3),
     dict(healthy_reward=3.0, reset_noise_scale=0.3)),
    ("Pusher-v5", dict(reward_near_weight=2.0, reward_control_weight=0.5, xml_file="pusher.xml"),
     dict(reward_near_weight=2.0, reward_control_weight=0.5, xml_file="pusher.xml")),
    ("Reacher-v5", dict(reward_dist_weight=3.0, reward_control_weight=0.2),
     dict(reward_dist_weight=3.0, reward_control_weight=0.2)),
]


@pytest.mark.parametrize("env_id,options,gym_kwargs", OPTION_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(OPTION_CASES)])
def test_alignment_with_options(env_id: str, options: dict, gym_kwargs: dict) -> None:
    _run_alignment(env_id, options, gym_kwargs, 60, 120, seed=7)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", TASKS)
def test_alignment_long(env_id: str) -> None:
    """Full-length episodes (Gymnasium's default time limit) for longer drifts."""
    default = spec(env_id).max_episode_steps
    _run_alignment(env_id, {}, {}, default, 3000, seed=11)


def test_specs_match_gymnasium() -> None:
    for env_id in TASKS:
        ours = spec(env_id)
        ref = gymnasium.make(env_id, disable_env_checker=True)
        assert ours.observation_space.shape == ref.observation_space.shape, env_id
        assert ours.observation_space.dtype == np.float64
        assert ours.action_space.shape == ref.action_space.shape, env_id
        assert ours.max_episode_steps == ref.spec.max_episode_steps, env_id
        ref.close()


# ------------------------------------------------- reset oracle and info keys --
_PoolRng = PoolRng


def test_pool_rng_twin_matches_the_pool() -> None:
    """The twin reproduces the pool's draws: HalfCheetah's qpos0 is
    init_qpos + U(-0.1, 0.1) element by element."""
    ref = gymnasium.make("HalfCheetah-v5", disable_env_checker=True).unwrapped
    with make("HalfCheetah-v5", num_envs=1, seed=[99]) as pool:
        qpos0 = pool.reset()[1]["qpos0"][0]
    twin = _PoolRng(99)
    np.testing.assert_array_equal(qpos0, ref.init_qpos + twin.uniform(-0.1, 0.1, ref.model.nq))
    ref.close()


# Every task with its defaults, and each kind of noise at another scale.
RESET_CASES = [(t, {}) for t in TASKS] + [
    ("HalfCheetah-v5", {"reset_noise_scale": 0.5}),  # uniform qpos, normal qvel
    ("Hopper-v5", {"reset_noise_scale": 0.05}),  # uniform qpos and qvel
    ("InvertedDoublePendulum-v5", {"reset_noise_scale": 0.3}),
    ("Humanoid-v5", {"reset_noise_scale": 0.1}),
]


@pytest.mark.parametrize("env_id,options", RESET_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(RESET_CASES)])
def test_reset_is_gymnasiums_reset_model(env_id: str, options: dict) -> None:
    """Gymnasium's own reset_model, fed the numbers our env draws (the
    generator's twin, same seed), gives the same initial state and first
    observation, bit for bit, and the same reset info (to the last ulps of a
    norm), reset after reset (so the number of draws per reset agrees too:
    Reacher's and Pusher's rejection loops)."""
    seeds = [0, 12345, 2**63 + 7]
    ref = gymnasium.make(env_id, disable_env_checker=True, **options).unwrapped
    twins = [_PoolRng(s) for s in seeds]
    try:
        with make(env_id, num_envs=len(seeds), seed=seeds, **options) as pool:
            for _ in range(3):
                obs, info = pool.reset()
                for i, twin in enumerate(twins):
                    ref.np_random = twin
                    r_obs, r_info = ref.reset()
                    where = f"{env_id} env {i}"
                    np.testing.assert_array_equal(info["qpos0"][i], ref.data.qpos, where)
                    np.testing.assert_array_equal(info["qvel0"][i], ref.data.qvel, where)
                    np.testing.assert_array_equal(obs[i], r_obs, where)
                    for key, value in r_info.items():  # np.linalg.norm may round apart
                        np.testing.assert_allclose(info[key][i], value, rtol=1e-12, atol=1e-15,
                                                   err_msg=f"{where}: {key}")
    finally:
        ref.close()


@pytest.mark.parametrize("env_id", TASKS)
def test_info_keys_are_gymnasiums(env_id: str) -> None:
    """The info names Python sees (spec, pool, TorchRL env) are Gymnasium's
    step info keys in Gymnasium's order, its reset info keys among them, and
    the values agree over a few synced steps."""
    from torchfrag.envs.torchrl_env import resolve_info_keys

    ref = gymnasium.make(env_id, disable_env_checker=True).unwrapped
    ours = spec(env_id)
    names = [n for n in ours.infos if n not in OUR_INFOS]
    try:
        with make(env_id, num_envs=1, seed=4) as pool:
            obs, info = pool.reset()
            _, r_info = ref.reset(seed=0)
            assert set(r_info) <= set(names)
            ref.set_state(info["qpos0"][0].copy(), info["qvel0"][0].copy())
            actions = np.random.default_rng(0).uniform(-1, 1, (4,) + ref.action_space.shape)
            for t, action in enumerate(actions):
                *_, info = pool.step(action[None])
                *_, r_info = ref.step(action)
                assert names == list(r_info)
                assert [k for k in info if k not in OUR_INFOS] == names
                for key, value in r_info.items():
                    _close(info[key][0], value, f"{env_id} step {t}: info {key}")
    finally:
        ref.close()
    assert set(names) <= set(resolve_info_keys(ours, None).values())


def _trajectory_sync(env_id: str, num_threads: int, steps: int, actions: np.ndarray) -> list:
    with make(env_id, num_envs=actions.shape[1], num_threads=num_threads, seed=5) as pool:
        obs, _ = pool.reset()
        out = [[obs[i].copy()] for i in range(pool.num_envs)]
        for t in range(steps):
            obs, rew, term, trunc, _ = pool.step(actions[t])
            for i in range(pool.num_envs):
                out[i].append(np.concatenate([obs[i], [rew[i], term[i], trunc[i]]]))
    return out


def _trajectory_async(env_id: str, num_threads: int, batch_size: int, steps: int,
                      actions: np.ndarray) -> list:
    """Async rollout; envs come back in the order they finish, so every env keeps being
    sent (steps past the end are not recorded) until all have their trajectory."""
    n = actions.shape[1]
    with make(env_id, num_envs=n, num_threads=num_threads, batch_size=batch_size,
              seed=5) as pool:
        out: list[list] = [[] for _ in range(n)]
        pool.async_reset()
        while min(len(o) for o in out) < steps + 1:
            obs, rew, term, trunc, info = pool.recv(timeout=30)
            ids = [int(i) for i in info["env_id"]]
            for j, i in enumerate(ids):
                if not out[i]:
                    out[i].append(obs[j].copy())
                elif len(out[i]) < steps + 1:
                    out[i].append(np.concatenate([obs[j], [rew[j], term[j], trunc[j]]]))
            acts = [actions[min(len(out[i]) - 1, steps - 1), i] for i in ids]
            pool.send(np.stack(acts), np.array(ids))
    return out


@pytest.mark.parametrize("env_id", ["Hopper-v5", "Ant-v5"])
def test_determinism_across_threads_and_modes(env_id: str) -> None:
    n, steps = 6, 60
    shape = spec(env_id).action_space.shape
    actions = np.random.default_rng(3).uniform(-1, 1, size=(steps, n) + shape)
    one = _trajectory_sync(env_id, 1, steps, actions)
    three = _trajectory_sync(env_id, 3, steps, actions)
    asyn = _trajectory_async(env_id, 2, 3, steps, actions)
    for i in range(n):
        assert len(one[i]) == steps + 1
        for t in range(steps + 1):
            np.testing.assert_array_equal(one[i][t], three[i][t])
            np.testing.assert_array_equal(one[i][t], asyn[i][t])


def test_seeds_change_initial_state() -> None:
    with make("HalfCheetah-v5", num_envs=3, seed=0) as a, \
            make("HalfCheetah-v5", num_envs=3, seed=1) as b, \
            make("HalfCheetah-v5", num_envs=3, seed=0) as c:
        qa = a.reset()[1]["qpos0"].copy()
        qb = b.reset()[1]["qpos0"].copy()
        qc = c.reset()[1]["qpos0"].copy()
    assert not np.allclose(qa, qb)
    assert not np.allclose(qa[0], qa[1])  # envs of one pool differ too
    np.testing.assert_array_equal(qa, qc)


def test_qpos0_is_the_episode_start() -> None:
    """qpos0/qvel0 stay those of the episode start and change on (auto-)reset."""
    with make("Hopper-v5", num_envs=1, seed=2, max_episode_steps=5) as pool:
        _, info = pool.reset()
        start = info["qpos0"].copy()
        for _ in range(5):
            _, _, _, trunc, info = pool.step(np.zeros((1, 3)))
            np.testing.assert_array_equal(info["qpos0"], start)
        assert trunc[0]
        obs, _, _, _, info = pool.step(np.zeros((1, 3)))  # next_step auto-reset
        assert not np.array_equal(info["qpos0"], start)
        np.testing.assert_array_equal(obs[0, :5], info["qpos0"][0, 1:])


def test_per_env_options() -> None:
    with make("HalfCheetah-v5", num_envs=2, seed=0, ctrl_cost_weight=[0.1, 1.0]) as pool:
        pool.reset()
        _, _, _, _, info = pool.step(np.ones((2, 6)))
        np.testing.assert_allclose(info["reward_ctrl"], [-0.6, -6.0])


def test_same_step_autoreset_reports_new_start() -> None:
    with make("InvertedPendulum-v5", num_envs=1, seed=0, autoreset="same_step") as pool:
        pool.reset()
        for _ in range(200):
            obs, _, term, trunc, info = pool.step(np.full((1, 1), 3.0))
            if term[0] or trunc[0]:
                break
        assert term[0]
        # obs is the new episode's first observation, built from qpos0/qvel0.
        np.testing.assert_array_equal(obs[0], np.concatenate([info["qpos0"][0],
                                                              info["qvel0"][0]]))
        assert not np.array_equal(info["final_obs"][0], obs[0])


# ------------------------------------------------------------------ bad input --
@pytest.fixture(scope="module")
def cheetah():
    pool = make("HalfCheetah-v5", num_envs=2, seed=0)
    pool.reset()
    yield pool
    pool.close()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_actions_rejected(cheetah, bad: float) -> None:
    actions = np.zeros((2, 6))
    actions[1, 3] = bad
    with pytest.raises(ValueError, match="not finite"):
        cheetah.step(actions)
    cheetah.step(np.zeros((2, 6)))  # still usable


@pytest.mark.parametrize("shape", [(2, 5), (2,), (3, 6), (2, 6, 1)])
def test_wrong_action_shape_rejected(cheetah, shape: tuple) -> None:
    with pytest.raises(ValueError, match="shape"):
        cheetah.step(np.zeros(shape))


@pytest.mark.parametrize("actions", [np.full((2, 6), "a"), np.zeros((2, 6), dtype=bool),
                                     np.zeros((2, 6), dtype=complex)])
def test_wrong_action_dtype_rejected(cheetah, actions: np.ndarray) -> None:
    with pytest.raises(TypeError, match="floating point"):
        cheetah.step(actions)


def test_float32_actions_accepted(cheetah) -> None:
    cheetah.step(np.zeros((2, 6), dtype=np.float32))


@pytest.mark.parametrize("options,match", [
    ({"no_such_option": 1}, "unknown option 'no_such_option'"),
    ({"frame_skip": 0}, "frame_skip must be >= 1"),
    ({"frame_skip": 2.5}, "expects an integer"),
    ({"ctrl_cost_weight": "heavy"}, "expects a number"),
    ({"ctrl_cost_weight": [0.1, 0.2, 0.3]}, "per-env values"),
    ({"xml_file": "no_such_model.xml"}, "no_such_model.xml' does not exist"),
    ({"xml_file": "/nonexistent/dir/ant.xml"}, "does not exist"),
    ({"reset_noise_scale": np.nan}, "must be a finite number, got nan"),
])
def test_bad_options_rejected(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make("HalfCheetah-v5", num_envs=2, **options)


def test_bad_model_file_rejected(tmp_path) -> None:
    broken = tmp_path / "broken.xml"
    broken.write_text("<mujoco><worldbody><body></mujoco>")
    with pytest.raises(ValueError, match="could not (parse|load)"):
        make("HalfCheetah-v5", xml_file=str(broken))
    # A valid model without the bodies a task needs.
    with pytest.raises(ValueError, match="fingertip|needs"):
        make("Reacher-v5", xml_file="half_cheetah.xml")


@pytest.mark.parametrize("main_body,match", [("nope", "no body named 'nope'"),
                                              (99, "out of range"), (1.5, "integer")])
def test_bad_main_body_rejected(main_body, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make("Ant-v5", main_body=main_body)


def test_absolute_xml_path(tmp_path) -> None:
    import os

    from torchfrag._preload.mujoco import gymnasium_assets_dir

    path = os.path.join(gymnasium_assets_dir(), "half_cheetah.xml")
    with make("HalfCheetah-v5", xml_file=path) as pool:
        obs, _ = pool.reset()
    assert obs.shape == (1, 17)


def test_preload_rejects_other_mujoco_version(monkeypatch) -> None:
    import importlib.metadata

    from torchfrag._preload import mujoco as preload_mujoco

    monkeypatch.setattr(preload_mujoco, "_library", None)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "3.1.0")
    with pytest.raises(ImportError, match=r"built against mujoco 4\.0\.0 but mujoco 3\.1\.0"):
        preload_mujoco.preload()


def test_model_loading_is_quiet(tmp_path, monkeypatch, capfd) -> None:
    """Compile-time notes (half_cheetah.xml's deprecated settotalmass) are not
    printed and no MUJOCO_LOG.TXT appears in the working directory."""
    import shutil

    from torchfrag._preload.mujoco import gymnasium_assets_dir

    model = tmp_path / "cheetah_copy.xml"  # a new path: never cached before
    shutil.copy(f"{gymnasium_assets_dir()}/half_cheetah.xml", model)
    with make("HalfCheetah-v5", xml_file=str(model)) as pool:
        pool.reset()
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    assert "settotalmass" not in capfd.readouterr().out
