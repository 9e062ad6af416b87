"""Gymnasium's ``ALE/<Game>-v5`` ids on the native pool, against ``gymnasium.make("ALE/...")``.

With ``repeat_action_probability`` 0 or 1 the two are compared step for step
(observations, rewards, terminations); with Gymnasium's 0.25 the sticky
actions draw from the env's own stream (not ALE's), so that case is checked
for what it must do: trajectories leave the non-sticky one, reproducibly per
seed.
"""
from __future__ import annotations

import numpy as np
import pytest

from torchfrag.envs import list_envs, make, spec

pytestmark = pytest.mark.skipif("Pong-v5" not in list_envs(), reason="Atari not built")

gymnasium = pytest.importorskip("gymnasium")
ale_py = pytest.importorskip("ale_py")
gymnasium.register_envs(ale_py)


def _run_both(game: str, steps: int, seed: int, **kwargs) -> int:
    """Steps Gymnasium's env and ours with the same random actions; returns steps compared."""
    ref = gymnasium.make(f"ALE/{game}-v5", **kwargs)
    ours = make(f"ALE/{game}-v5", num_envs=1, seed=0, **kwargs)
    a, _ = ref.reset(seed=seed)
    b, _ = ours.reset()
    np.testing.assert_array_equal(b[0], a)
    rng = np.random.default_rng(seed)
    for t in range(steps):
        action = int(rng.integers(ref.action_space.n))
        a, ra, ta, ua, ia = ref.step(action)
        b, rb, tb, ub, ib = ours.step(np.array([action]))
        np.testing.assert_array_equal(b[0], a, err_msg=f"{game} step {t}")
        assert (float(rb[0]), bool(tb[0]), bool(ub[0])) == (ra, ta, ua), f"{game} step {t}"
        assert int(ib["lives"][0]) == ia["lives"]
        if ta or ua:
            break
    ref.close()
    ours.close()
    return t + 1


@pytest.mark.parametrize("game,p", [("Pong", 0.0), ("Breakout", 1.0), ("Pacman", 0.0)])
def test_step_for_step_equal_to_gymnasium(game: str, p: float) -> None:
    # Pacman's screen is 250 rows: the observation is the game's own screen, as ale-py's.
    steps = _run_both(game, 700, seed=3, repeat_action_probability=p)
    assert steps > 100


def test_breakout_to_game_over_with_frameskip_and_full_action_space() -> None:
    # Gymnasium's own keyword arguments, with their meaning; every skipped frame is
    # emulated even after the game ends (no early stop, no max-pool).
    steps = _run_both("Breakout", 5000, seed=0, repeat_action_probability=0.0, frameskip=3,
                      full_action_space=True)
    assert steps < 5000  # the game ended within the run, and both agreed on where


def test_every_game_has_an_ale_id_with_gymnasiums_spaces() -> None:
    games = [i for i in list_envs() if i.endswith("-v5") and "max_pool" in spec(i).options]
    assert len(games) > 90
    specs = {g: spec(f"ALE/{g}") for g in games}  # every game resolves
    # Gymnasium's own spaces for a sample (loading every ROM takes most of a minute on
    # a loaded host), with every game whose screen is taller than 210 rows.
    tall = [g for g, s in specs.items() if s.observation_space.shape[0] != 210]
    assert len(tall) == 13 and {"Pacman-v5", "Adventure-v5", "Pooyan-v5"} <= set(tall)
    for native in ["Pong-v5", "Breakout-v5", "SpaceInvaders-v5", "MontezumaRevenge-v5", *tall]:
        ref = gymnasium.make(f"ALE/{native}")
        ours = specs[native]
        assert ours.observation_space.shape == ref.observation_space.shape, native
        assert ours.observation_space.dtype == np.uint8
        assert ours.action_space.n == ref.action_space.n, native
        ref.close()


def test_sticky_actions_default_to_a_quarter_and_follow_the_seed() -> None:
    def episode(seed: int, p: float) -> np.ndarray:
        env = make("ALE/Breakout-v5", num_envs=1, seed=seed, repeat_action_probability=p)
        env.reset()
        rng = np.random.default_rng(0)
        frames = [env.step(rng.integers(0, 4, 1))[0][0].copy() for _ in range(200)]
        env.close()
        return np.stack(frames)

    assert spec("ALE/Breakout-v5").options["repeat_action_probability"].default == 0.0
    assert make("ALE/Breakout-v5").options["repeat_action_probability"] == 0.25
    plain = episode(0, 0.0)
    sticky = episode(0, 0.25)
    assert not np.array_equal(plain, sticky)
    np.testing.assert_array_equal(sticky, episode(0, 0.25))
    assert not np.array_equal(sticky, episode(1, 0.25))


def test_gymnasium_settings_and_refusals() -> None:
    env = make("ALE/Pong-v5")
    o = env.options
    assert (o["frame_skip"], o["max_pool"], o["noop_max"], o["use_fire_reset"],
            o["stack_num"], o["max_episode_steps"]) == (4, False, 0, False, 1, 27000)
    assert env.observation_space.shape == (210, 160, 3)
    env.close()
    assert spec("ALE/Pong-v5", obs_type="grayscale").observation_space.shape == (210, 160, 1)
    with pytest.raises(ValueError, match="obs_type must be 'rgb' or 'grayscale'"):
        make("ALE/Pong-v5", obs_type="ram")
    with pytest.raises(ValueError, match="no Atari game 'Nope-v5'"):
        make("ALE/Nope-v5")
    with pytest.raises(ValueError, match="frameskip must be an int"):
        make("ALE/Pong-v5", frameskip=(2, 5))
