"""Atari (ALE) envs of the pool: alignment with ale-py + Gymnasium's wrappers, option
semantics, determinism, bad input, the build/preload contract, and the tutorial.

The reference for alignment is ``gymnasium.make("ALE/<Game>-v5", frameskip=1,
repeat_action_probability=0)`` wrapped in ``AtariPreprocessing(noop_max=0,
frame_skip=4, screen_size=84, grayscale_obs=True)`` and a 4-frame stack; ours runs
with ``noop_max=0, use_fire_reset=False``.  With no sticky actions and no no-ops
both are deterministic, so the same actions must give the same episode.
"""
from __future__ import annotations

import os
import subprocess
import sys

import gymnasium
import numpy as np
import pytest

from torchfrag.envs import list_envs, make, make_gymnasium

ale_py = pytest.importorskip("ale_py")
cv2 = pytest.importorskip("cv2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALIGN = {"noop_max": 0, "use_fire_reset": False}

pytestmark = pytest.mark.skipif("Pong-v5" not in list_envs(), reason="Atari envs not built")
MUJOCO_IDS = {"Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "HumanoidStandup-v5",
              "InvertedDoublePendulum-v5", "InvertedPendulum-v5", "Pusher-v5", "Reacher-v5",
              "Swimmer-v5", "Walker2d-v5"}


# -- helpers --------------------------------------------------------------------------------
def reference(game: str, **kwargs):
    """ale-py env + Gymnasium's AtariPreprocessing + frame stacking."""
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gymnasium.register_envs(ale_py)
    env = gymnasium.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0,
                         full_action_space=kwargs.pop("full_action_space", False))
    env = AtariPreprocessing(env, noop_max=0, frame_skip=4, screen_size=84, **kwargs)
    return FrameStackObservation(env, 4)


def rollout(pool, actions: np.ndarray) -> dict[str, np.ndarray]:
    """Sync rollout of a pool with per-step actions of shape [T, num_envs]."""
    obs, info = pool.reset()
    out: dict[str, list] = {"obs": [obs.copy()], "reward": [], "terminated": [],
                            "truncated": [], "lives": [info["lives"].copy()],
                            "game_over": [], "raw_reward": []}
    for a in actions:
        obs, rew, term, trunc, info = pool.step(a)
        out["obs"].append(obs.copy())
        out["reward"].append(rew.copy())
        out["terminated"].append(term.copy())
        out["truncated"].append(trunc.copy())
        out["lives"].append(info["lives"].copy())
        out["game_over"].append(info["terminated"].copy())
        out["raw_reward"].append(info["reward"].copy())
    return {k: np.stack(v) for k, v in out.items()}


def random_actions(n_actions: int, steps: int, num_envs: int = 1, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_actions, size=(steps, num_envs))


def assert_close_frames(ours: np.ndarray, ref: np.ndarray, where: str) -> None:
    diff = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
    assert diff.max() <= 1, f"{where}: max gray difference {diff.max()} at {np.argwhere(diff > 1)[:3]}"


# -- alignment ------------------------------------------------------------------------------
@pytest.mark.parametrize("game, max_steps", [("Pong", 6000), ("Breakout", 6000)])
def test_alignment_with_gymnasium_until_game_over(game: str, max_steps: int) -> None:
    ref = reference(game)
    pool = make(f"{game}-v5", num_envs=1, seed=0, **ALIGN)
    n = pool.action_space.n
    assert n == ref.action_space.n
    rng = np.random.default_rng(1)
    r_obs, r_info = ref.reset(seed=0)
    obs, info = pool.reset()
    assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
    assert_close_frames(obs[0], r_obs, "reset")
    assert info["lives"][0] == r_info["lives"]
    lives_lost = 0
    pool_lives = int(info["lives"][0])
    differing_pixels = 0
    for t in range(max_steps):
        a = int(rng.integers(n))
        r_obs, r_rew, r_term, r_trunc, r_info = ref.step(a)
        obs, rew, term, trunc, info = pool.step(np.array([a]))
        assert_close_frames(obs[0], r_obs, f"step {t}")
        differing_pixels += int((obs[0] != r_obs).sum())
        assert rew[0] == r_rew, f"step {t}: reward {rew[0]} vs {r_rew}"
        assert info["reward"][0] == r_rew
        assert info["lives"][0] == r_info["lives"], f"step {t}"
        assert bool(term[0]) == r_term and bool(trunc[0]) == r_trunc, f"step {t}"
        assert bool(info["terminated"][0]) == r_term
        assert info["elapsed_step"][0] == t + 1
        lives_lost += int(info["lives"][0] < pool_lives)
        pool_lives = int(info["lives"][0])
        if r_term or r_trunc:
            break
    else:
        pytest.fail(f"{game}: no game over within {max_steps} steps")
    if game == "Breakout":
        assert lives_lost >= 1
    # Rounding (exact integer area average vs OpenCV's float sums) may move a
    # pixel by one level; it must stay rare.
    assert differing_pixels <= 0.001 * (t + 1) * obs[0].size


@pytest.mark.parametrize("game", ["Pacman", "Pooyan", "Carnival"])
def test_games_with_taller_screens_align(game: str) -> None:
    """Some ROMs draw 250, 220 or 214 rows instead of 210; resizing follows the real size."""
    ref = reference(game)
    pool = make(f"{game}-v5", num_envs=1, seed=0, **ALIGN)
    r_obs, _ = ref.reset(seed=0)
    obs, _ = pool.reset()
    assert_close_frames(obs[0], r_obs, "reset")
    for t, a in enumerate(random_actions(pool.action_space.n, 150)[:, 0]):
        r_obs, r_rew, r_term, r_trunc, _ = ref.step(int(a))
        obs, rew, term, trunc, _ = pool.step(np.array([a]))
        assert_close_frames(obs[0], r_obs, f"{game} step {t}")
        assert rew[0] == r_rew and bool(term[0]) == r_term and bool(trunc[0]) == r_trunc
        if r_term or r_trunc:
            break


def test_every_game_steps() -> None:
    for env_id in list_envs():
        if not env_id.endswith("-v5") or env_id in MUJOCO_IDS:
            continue
        pool = make(env_id, num_envs=1, noop_max=0)
        pool.reset()
        obs, *_ = pool.step(np.zeros(1, dtype=np.int64))
        assert obs.shape == (1, 4, 84, 84), env_id
        pool.close()


def test_rgb_observations_match_reference() -> None:
    ref = reference("Pong", grayscale_obs=False)
    pool = make("Pong-v5", num_envs=1, gray_scale=False, **ALIGN)
    assert pool.observation_space.shape == (12, 84, 84)
    r_obs, _ = ref.reset(seed=0)
    obs, _ = pool.reset()
    # Reference: [stack, H, W, 3]; ours: [stack * 3, H, W], channels per frame.
    to_ours = lambda x: np.transpose(x, (0, 3, 1, 2)).reshape(12, 84, 84)  # noqa: E731
    assert_close_frames(obs[0], to_ours(r_obs), "reset")
    for t, a in enumerate(random_actions(6, 120, seed=3)[:, 0]):
        r_obs, r_rew, *_ = ref.step(int(a))
        obs, rew, *_ = pool.step(np.array([a]))
        assert_close_frames(obs[0], to_ours(r_obs), f"step {t}")
        assert rew[0] == r_rew


@pytest.mark.parametrize("height,width", [(105, 80), (1, 1), (33, 160), (210, 7), (84, 53)])
def test_resize_matches_opencv_inter_area_for_other_sizes(height: int, width: int) -> None:
    """Non-default sizes and frame stacks use the same INTER_AREA arithmetic.

    The sizes give 1 to 160 source columns per output column, which the
    renderer handles with different code paths.
    """
    pool = make("Breakout-v5", num_envs=1, img_height=height, img_width=width, stack_num=2,
                frame_skip=1, **ALIGN)
    obs, _ = pool.reset()
    assert obs.shape == (1, 2, height, width)
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(str(ale_py.roms.get_rom_path("breakout")))
    ale.reset_game()
    actions = [int(a) for a in random_actions(4, 60, seed=5)[:, 0]]
    minimal = ale.getMinimalActionSet()
    for a in actions:
        ale.act(minimal[a])
        obs, *_ = pool.step(np.array([a]))
        screen = cv2.resize(ale.getScreenGrayscale(), (width, height), interpolation=cv2.INTER_AREA)
        assert_close_frames(obs[0, -1], screen.reshape(height, width), "frame")


# -- option semantics -----------------------------------------------------------------------
def test_reward_clip_keeps_unclipped_reward_in_info() -> None:
    acts = random_actions(6, 400, seed=2)
    raw = rollout(make("SpaceInvaders-v5", **ALIGN), acts)
    clipped = rollout(make("SpaceInvaders-v5", reward_clip=True, **ALIGN), acts)
    assert np.abs(raw["reward"]).max() > 1, "the test needs rewards beyond +-1"
    np.testing.assert_array_equal(clipped["reward"], np.sign(raw["reward"]))
    np.testing.assert_array_equal(clipped["raw_reward"], raw["reward"])
    np.testing.assert_array_equal(clipped["obs"], raw["obs"])


def test_episodic_life_ends_episode_on_life_loss_but_not_the_game() -> None:
    acts = random_actions(4, 3000, seed=4)
    pool = make("Breakout-v5", episodic_life=True, **ALIGN)
    obs, info = pool.reset()
    lives = int(info["lives"][0])
    assert lives == 5
    life_ends = 0
    for t, a in enumerate(acts):
        obs, rew, term, trunc, info = pool.step(a)
        if term[0]:
            if info["terminated"][0]:  # the real game over
                assert info["lives"][0] == 0
                break
            life_ends += 1
            assert info["lives"][0] == lives - 1
            lives = int(info["lives"][0])
            # next_step auto-reset: the game goes on with the remaining lives.
            obs, rew, term, trunc, info = pool.step(a)
            assert info["elapsed_step"][0] == 0 and rew[0] == 0
            assert info["lives"][0] == lives
    else:
        pytest.fail("no game over")
    assert life_ends == 4


def test_fire_reset_launches_the_ball_and_is_skipped_without_fire() -> None:
    noop = np.zeros((300, 1), dtype=np.int64)
    # Breakout: without FIRE the ball never comes, so no life is ever lost.
    still = rollout(make("Breakout-v5", noop_max=0, use_fire_reset=False), noop)
    fired = rollout(make("Breakout-v5", noop_max=0, use_fire_reset=True), noop)
    assert still["lives"].min() == 5
    assert fired["lives"].min() < 5
    # Freeway has no FIRE action: the option changes nothing (EnvPool #221).
    acts = random_actions(3, 100, seed=1)
    a = rollout(make("Freeway-v5", noop_max=0, use_fire_reset=False), acts)
    b = rollout(make("Freeway-v5", noop_max=0, use_fire_reset=True), acts)
    np.testing.assert_array_equal(a["obs"], b["obs"])


def test_full_action_space_maps_to_ale_actions() -> None:
    minimal = make("Pong-v5", **ALIGN)
    full = make("Pong-v5", full_action_space=True, **ALIGN)
    assert minimal.action_space.n == 6 and full.action_space.n == 18
    ale_ids = np.array([0, 1, 3, 4, 11, 12])  # Pong's minimal set in ALE numbering
    acts = random_actions(6, 200, seed=6)
    a = rollout(minimal, acts)
    b = rollout(full, ale_ids[acts])
    np.testing.assert_array_equal(a["obs"], b["obs"])
    np.testing.assert_array_equal(a["reward"], b["reward"])
    full.step(np.array([17]))  # valid only in the full space
    with pytest.raises(ValueError, match="out of range"):
        minimal.step(np.array([17]))


def test_noop_max_randomises_starts_per_seed() -> None:
    acts = np.tile(random_actions(6, 40, seed=7), (1, 4))
    fixed = rollout(make("Pong-v5", num_envs=4, seed=0, noop_max=0), acts)["obs"]
    assert all(np.array_equal(fixed[:, 0], fixed[:, i]) for i in range(4))
    noisy = rollout(make("Pong-v5", num_envs=4, seed=0, noop_max=30), acts)["obs"]
    distinct = {noisy[:, i].tobytes() for i in range(4)}
    assert len(distinct) >= 3
    again = rollout(make("Pong-v5", num_envs=4, seed=0, noop_max=30), acts)["obs"]
    np.testing.assert_array_equal(noisy, again)
    other = rollout(make("Pong-v5", num_envs=4, seed=1, noop_max=30), acts)["obs"]
    assert not np.array_equal(noisy, other)


def test_noop_reset_equals_that_many_noop_frames() -> None:
    """With noop_max=k the first frame is the screen after 1..k NOOP frames."""
    pool = make("Pong-v5", num_envs=4, seed=3, noop_max=25, use_fire_reset=False)
    obs, _ = pool.reset()
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.loadROM(str(ale_py.roms.get_rom_path("pong")))
    ale.reset_game()
    screens = []
    for _ in range(25):
        ale.act(ale_py.Action.NOOP)
        screens.append(cv2.resize(ale.getScreenGrayscale(), (84, 84),
                                  interpolation=cv2.INTER_AREA).astype(np.int16))
    for i in range(4):
        assert min(np.abs(s - obs[i, -1]).max() for s in screens) <= 1


def test_sticky_actions() -> None:
    acts = random_actions(6, 150, seed=8)
    noop = np.zeros_like(acts)
    base = rollout(make("Pong-v5", **ALIGN), acts)
    # p = 1: the first action (NOOP after reset) sticks forever.
    stuck = rollout(make("Pong-v5", repeat_action_probability=1.0, **ALIGN), acts)
    idle = rollout(make("Pong-v5", **ALIGN), noop)
    np.testing.assert_array_equal(stuck["obs"], idle["obs"])
    # 0 < p < 1: differs from p = 0, reproducible per seed, differs across seeds.
    s1 = rollout(make("Pong-v5", seed=1, repeat_action_probability=0.25, **ALIGN), acts)
    s1b = rollout(make("Pong-v5", seed=1, repeat_action_probability=0.25, **ALIGN), acts)
    s2 = rollout(make("Pong-v5", seed=2, repeat_action_probability=0.25, **ALIGN), acts)
    assert not np.array_equal(s1["obs"], base["obs"])
    np.testing.assert_array_equal(s1["obs"], s1b["obs"])
    assert not np.array_equal(s1["obs"], s2["obs"])


def test_max_episode_steps_truncates() -> None:
    pool = make("Pong-v5", max_episode_steps=10, **ALIGN)
    assert pool.spec.max_episode_steps == 10
    pool.reset()
    for t in range(1, 11):
        obs, rew, term, trunc, info = pool.step(np.array([0]))
        assert info["elapsed_step"][0] == t
        assert bool(trunc[0]) == (t == 10) and not term[0]
    obs, rew, term, trunc, info = pool.step(np.array([0]))  # auto-reset
    assert info["elapsed_step"][0] == 0 and not trunc[0]


def test_default_options_follow_envpool() -> None:
    spec = make("Pong-v5").spec
    defaults = {name: o.default for name, o in spec.options.items()}
    expected = {"frame_skip": 4, "stack_num": 4, "img_height": 84, "img_width": 84,
                "gray_scale": True, "noop_max": 30, "episodic_life": False,
                "zero_discount_on_life_loss": False, "reward_clip": False,
                "use_fire_reset": True, "repeat_action_probability": 0.0,
                "full_action_space": False, "max_episode_steps": 27000}
    for name, value in expected.items():
        assert defaults[name] == value, name
    assert spec.max_episode_steps == 27000
    assert set(spec.infos) >= {"lives", "reward", "terminated"}


def test_mode_and_difficulty() -> None:
    acts = random_actions(6, 60, seed=9)
    a = rollout(make("SpaceInvaders-v5", mode=0, **ALIGN), acts)
    b = rollout(make("SpaceInvaders-v5", mode=3, difficulty=1, **ALIGN), acts)
    assert a["obs"].shape == b["obs"].shape
    with pytest.raises(ValueError, match="mode 99 is not available"):
        make("Pong-v5", mode=99)
    with pytest.raises(ValueError, match="difficulty 7 is not available"):
        make("Pong-v5", difficulty=7)


# -- modes of the pool ----------------------------------------------------------------------
def _per_env_async(pool, actions: np.ndarray) -> dict[int, list[np.ndarray]]:
    """Async rollout: each env gets actions[k, env] on its k-th step.

    Envs come back in the order they finish, so every env keeps being sent
    (extra steps past the end are not recorded) until all have their steps.
    """
    n = pool.num_envs
    steps = len(actions)
    seen: dict[int, list[np.ndarray]] = {i: [] for i in range(n)}
    pool.async_reset()
    while min(len(v) for v in seen.values()) <= steps:
        obs, rew, term, trunc, info = pool.recv()
        ids = [int(i) for i in info["env_id"]]
        for row, i in enumerate(ids):
            if len(seen[i]) <= steps:
                seen[i].append(obs[row].copy())
        acts = [actions[min(len(seen[i]) - 1, steps - 1), i] for i in ids]
        pool.send(np.array(acts), np.array(ids))
    pool.close()
    return seen


def test_deterministic_across_threads_and_sync_async() -> None:
    opts = {"noop_max": 30, "repeat_action_probability": 0.25, "max_episode_steps": 25}
    acts = random_actions(6, 60, num_envs=4, seed=10)
    sync1 = rollout(make("Pong-v5", num_envs=4, num_threads=1, seed=5, **opts), acts)["obs"]
    sync2 = rollout(make("Pong-v5", num_envs=4, num_threads=2, seed=5, **opts), acts)["obs"]
    np.testing.assert_array_equal(sync1, sync2)
    pool = make("Pong-v5", num_envs=4, batch_size=2, num_threads=2, seed=5, **opts)
    per_env = _per_env_async(pool, acts)
    for i in range(4):
        np.testing.assert_array_equal(np.stack(per_env[i]), sync1[:, i])


@pytest.mark.parametrize("autoreset", ["next_step", "same_step"])
def test_autoreset_modes(autoreset: str) -> None:
    pool = make("Breakout-v5", num_envs=2, autoreset=autoreset, max_episode_steps=5, **ALIGN)
    first, _ = pool.reset()
    first = first.copy()
    for t in range(5):
        obs, rew, term, trunc, info = pool.step(np.array([1, 1]))
    assert trunc.all()
    if autoreset == "same_step":
        np.testing.assert_array_equal(obs, first)  # deterministic reset: same first obs
        assert not np.array_equal(info["final_obs"], obs)
    else:
        obs, rew, term, trunc, info = pool.step(np.array([1, 1]))
        np.testing.assert_array_equal(obs, first)
        assert (info["elapsed_step"] == 0).all()


def test_gymnasium_adapter() -> None:
    envs = make_gymnasium("Pong-v5", num_envs=2)
    obs, info = envs.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84) and envs.single_action_space.n == 6
    obs, rew, term, trunc, info = envs.step(envs.action_space.sample())
    assert "lives" in info and obs.dtype == np.uint8
    envs.close()
    env = gymnasium.make("torchfrag/Breakout-v5")
    obs, info = env.reset(seed=0)
    assert obs.shape == (4, 84, 84)
    env.step(env.action_space.sample())
    env.close()


def test_torchrl_pool_env() -> None:
    pytest.importorskip("torchrl")
    import torch
    from torchrl.envs.utils import check_env_specs

    from torchfrag.envs import PoolEnv

    # The env infos "reward" and "terminated" (EnvPool's names) would collide
    # with TorchRL's own keys, so this picks the non-colliding ones.
    env = PoolEnv("Pong-v5", num_envs=2, info_keys=["lives", "elapsed_step"])
    check_env_specs(env)
    td = env.rollout(3)
    assert td["next", "observation"].shape == (2, 3, 4, 84, 84)
    assert td["next", "observation"].dtype == torch.uint8
    env.close()


# -- ids, bad input, build contract ---------------------------------------------------------
def test_every_ale_py_game_is_registered() -> None:
    gymnasium.register_envs(ale_py)
    theirs = {k[len("ALE/"):] for k in gymnasium.registry if k.startswith("ALE/")
              and k.endswith("-v5")}
    roms = {r.replace("_", "") for r in ale_py.roms.get_all_rom_ids()}
    ours = {i for i in list_envs() if i.endswith("-v5") and i[:-3].lower() in roms}
    assert theirs == ours
    assert len(theirs) > 100


@pytest.mark.slow
def test_minimal_action_table_matches_ale() -> None:
    """The spec's action counts (a table, so specs need no ROM) match ALE's."""
    from torchfrag.envs import spec

    gymnasium.register_envs(ale_py)
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    for rom in ale_py.roms.get_all_rom_ids():
        name = rom.title().replace("_", "") + "-v5"
        if name not in list_envs():
            continue
        ale.loadROM(str(ale_py.roms.get_rom_path(rom)))
        assert spec(name).action_space.n == len(ale.getMinimalActionSet()), name


def test_bad_input_gives_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown env id 'Pongg-v5'"):
        make("Pongg-v5")
    with pytest.raises(ValueError, match="frame_skip must be >= 1"):
        make("Pong-v5", frame_skip=0)
    with pytest.raises(ValueError, match="repeat_action_probability must be in"):
        make("Pong-v5", repeat_action_probability=1.5)
    with pytest.raises(ValueError, match="img_height must be in"):
        make("Pong-v5", img_height=300)
    with pytest.raises(ValueError, match="expects an integer"):
        make("Pong-v5", stack_num=2.5)
    with pytest.raises(ValueError, match="unknown option 'framskip'"):
        make("Pong-v5", framskip=4)
    pool = make("Pong-v5", num_envs=2)
    pool.reset()
    with pytest.raises(ValueError, match="action 6 for env 1 is out of range"):
        pool.step(np.array([0, 6]))
    with pytest.raises(ValueError, match="out of range"):
        pool.step(np.array([-1, 0]))
    pool.step(np.array([5, 0]))  # still usable


def test_build_and_preload_pin_the_same_ale_version(monkeypatch) -> None:
    sys.path.insert(0, ROOT)
    try:
        from build_tools import ale as build_ale
    finally:
        sys.path.remove(ROOT)
    from torchfrag._preload import ale as preload_ale

    assert build_ale.ALE_VERSION == preload_ale.ALE_VERSION == ale_py.__version__
    monkeypatch.setattr(preload_ale, "_handle", None)
    monkeypatch.setattr(ale_py, "__version__", "0.11.0")
    with pytest.raises(ImportError, match=r"built against ale-py 0\.12\.1 but ale-py 0\.11\.0"):
        preload_ale.preload()


def test_fresh_process_imports_and_steps() -> None:
    code = ("import numpy as np; from torchfrag.envs import make; p = make('Pong-v5', num_envs=2);"
            "p.reset(); o, r, *_ = p.step(np.zeros(2, dtype=np.int64)); print(o.shape)")
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "(2, 4, 84, 84)" in out.stdout
