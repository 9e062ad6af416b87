"""Toy-text envs against Gymnasium 1.4.

Deterministic envs are stepped beside Gymnasium's after putting our state into
the reference's ``s``; stochastic ones are checked transition by transition
against Gymnasium's own table ``P[s][a]`` and, in aggregate, against its
probabilities; Blackjack hands are scored by Gymnasium's own code.
"""
from __future__ import annotations

import collections
import math

import gymnasium
import numpy as np
import pytest
from gymnasium.envs.toy_text import blackjack as gym_blackjack

from torchfrag.envs import make, spec

TOY_IDS = ["FrozenLake-v1", "FrozenLake8x8-v1", "Taxi-v4", "CliffWalking-v1",
           "CliffWalkingSlippery-v1", "Blackjack-v1"]


def _chi2_limit(dof: int, z: float = 3.72) -> float:
    """Upper chi-square quantile (about 1e-4 tail) by Wilson-Hilferty; no SciPy needed."""
    k = float(dof)
    return k * (1.0 - 2.0 / (9.0 * k) + z * math.sqrt(2.0 / (9.0 * k))) ** 3


def _chi2(observed: np.ndarray, expected: np.ndarray) -> float:
    return float(((observed - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("env_id", TOY_IDS)
def test_spec_is_gymnasiums(env_id: str) -> None:
    ref = gymnasium.make(env_id)
    ours = spec(env_id)
    if env_id == "Blackjack-v1":
        # Tuple(Discrete(32), Discrete(11), Discrete(2)) as one int64 vector.
        assert ours.observation_space == gymnasium.spaces.MultiDiscrete([32, 11, 2])
        assert [s.n for s in ref.observation_space.spaces] == [32, 11, 2]
    else:
        assert ours.observation_space == ref.observation_space
    assert ours.action_space == ref.action_space
    assert ours.max_episode_steps == (ref.spec.max_episode_steps or 0)
    assert ours.reward_threshold == ref.spec.reward_threshold


@pytest.mark.parametrize("env_id,options", [
    ("FrozenLake-v1", {"is_slippery": False}),
    ("FrozenLake8x8-v1", {"is_slippery": False}),
    ("FrozenLake-v1", {"is_slippery": False, "desc": "SFFFF,FHFHF,FFFHG"}),
    ("Taxi-v4", {}),
    ("CliffWalking-v1", {}),
])
def test_deterministic_dynamics_match_gymnasium(env_id: str, options: dict) -> None:
    num_envs, steps = 4, 1500
    rng = np.random.default_rng(0)
    pool = make(env_id, num_envs=num_envs, seed=3, **options)
    ref_options = dict(options)
    if "desc" in ref_options:
        ref_options["desc"] = ref_options["desc"].split(",")
    refs = [gymnasium.make(env_id, **ref_options) for _ in range(num_envs)]
    obs, info = pool.reset()
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
        ref.unwrapped.s = int(obs[i])
    episodes = cliff_falls = 0
    for t in range(steps):
        actions = rng.integers(0, pool.action_space.n, size=num_envs)
        obs, reward, terminated, truncated, info = pool.step(actions)
        for i, ref in enumerate(refs):
            r_obs, r_rew, r_term, r_trunc, r_info = ref.step(int(actions[i]))
            where = f"{env_id} env {i} step {t}"
            assert obs[i] == r_obs, where
            assert reward[i] == r_rew, where
            assert bool(terminated[i]) == r_term and bool(truncated[i]) == r_trunc, where
            assert info["prob"][i] == r_info["prob"], where
            if "action_mask" in r_info:
                np.testing.assert_array_equal(info["action_mask"][i], r_info["action_mask"],
                                              err_msg=where)
        cliff_falls += int((reward == -100).sum())
        done = terminated | truncated
        if done.any():
            episodes += int(done.sum())
            ids = np.flatnonzero(done)
            r_obs, _ = pool.reset(ids)
            for row, i in enumerate(ids):
                refs[i].reset()
                refs[i].unwrapped.s = int(r_obs[row])
    # A random walk seldom reaches the cliff's goal, but falls often (back to the start).
    assert episodes > 5 or (env_id.startswith("CliffWalking") and cliff_falls > 5)


@pytest.mark.parametrize("env_id,options", [
    ("FrozenLake-v1", {}),
    ("FrozenLake8x8-v1", {"success_rate": 0.6}),
    ("CliffWalkingSlippery-v1", {}),
    ("Taxi-v4", {"is_rainy": True}),
])
def test_stochastic_transitions_follow_gymnasiums_table(env_id: str, options: dict) -> None:
    num_envs, steps = 64, 600
    rng = np.random.default_rng(1)
    pool = make(env_id, num_envs=num_envs, seed=11, **options)
    table = gymnasium.make(env_id, **options).unwrapped.P
    counts: dict[tuple[int, int], collections.Counter] = collections.defaultdict(
        collections.Counter)
    obs, _ = pool.reset()
    state = obs.copy()
    for _ in range(steps):
        actions = rng.integers(0, pool.action_space.n, size=num_envs)
        obs, reward, terminated, truncated, info = pool.step(actions)
        for i in range(num_envs):
            s, a = int(state[i]), int(actions[i])
            outcome = (float(info["prob"][i]), int(obs[i]), float(reward[i]),
                       bool(terminated[i]))
            allowed = [(float(p), int(ns), float(r), bool(d)) for p, ns, r, d in table[s][a]]
            assert outcome in allowed, (env_id, s, a, outcome, allowed)
            counts[(s, a)][int(obs[i])] += 1
        state = obs.copy()
        done = terminated | truncated
        if done.any():
            ids = np.flatnonzero(done)
            r_obs, _ = pool.reset(ids)
            state[ids] = r_obs
    # Frequencies of next states against P, over (s, a) pairs seen often enough.
    stat, dof = 0.0, 0
    for (s, a), seen in counts.items():
        expected: collections.Counter = collections.Counter()
        for p, ns, _, _ in table[s][a]:
            expected[int(ns)] += p
        n = sum(seen.values())
        if len(expected) < 2 or n < 30:
            continue
        keys = sorted(expected)
        stat += _chi2(np.array([seen[k] for k in keys], float),
                      np.array([expected[k] * n for k in keys]))
        dof += len(keys) - 1
    assert dof >= 10, dof
    assert stat < _chi2_limit(dof), (stat, dof)


def test_slippery_frequencies_detect_a_wrong_success_rate() -> None:
    """The frequency check above can fail: our 0.6 lake is not Gymnasium's 1/3 lake."""
    pool = make("FrozenLake8x8-v1", num_envs=256, seed=2, success_rate=0.6)
    pool.reset()
    obs, *_ = pool.step(np.full(256, 2))  # right from the start cell 0
    moved_right = float((obs == 1).mean())
    ref_p = sum(p for p, ns, _, _ in gymnasium.make("FrozenLake8x8-v1").unwrapped.P[0][2]
                if ns == 1)
    assert abs(moved_right - 0.6) < 0.1 and abs(moved_right - ref_p) > 0.15


def _decode_taxi(s: int) -> tuple[int, int, int, int]:
    return s // 100, (s // 20) % 5, (s // 4) % 5, s % 4


def test_taxi_fickle_passenger_changes_destination_once() -> None:
    num_envs = 32
    rng = np.random.default_rng(4)
    pool = make("Taxi-v4", num_envs=num_envs, seed=5, fickle_passenger=True,
                fickle_probability=1.0)
    table = gymnasium.make("Taxi-v4").unwrapped.P
    obs, _ = pool.reset()
    state, changed = obs.copy(), np.zeros(num_envs, bool)
    changes = 0
    for _ in range(400):
        actions = rng.integers(0, 6, size=num_envs)
        obs, reward, terminated, truncated, _ = pool.step(actions)
        for i in range(num_envs):
            (p, ns, r, d), = table[int(state[i])][int(actions[i])]
            old, new, dry = _decode_taxi(int(state[i])), _decode_taxi(int(obs[i])), _decode_taxi(ns)
            assert reward[i] == r and bool(terminated[i]) == d
            if old[2] == 4 and old[:2] != dry[:2] and not changed[i]:
                # First move with the passenger aboard: a new destination, nothing else.
                assert new[:3] == dry[:3] and new[3] != old[3], (old, new)
                changed[i] = True
                changes += 1
            else:
                assert int(obs[i]) == ns
        state = obs.copy()
        done = terminated | truncated
        if done.any():
            ids = np.flatnonzero(done)
            r_obs, _ = pool.reset(ids)
            state[ids], changed[ids] = r_obs, False
    assert changes > 10


@pytest.mark.parametrize("options", [{}, {"sab": False, "natural": True},
                                     {"sab": False, "natural": False}])
def test_blackjack_rewards_are_gymnasiums_scoring(options: dict) -> None:
    num_envs = 256
    rng = np.random.default_rng(6)
    pool = make("Blackjack-v1", num_envs=num_envs, seed=9, **options)
    ref = gymnasium.make("Blackjack-v1", **options).unwrapped
    ref.reset(seed=0)

    def hand(counts: np.ndarray, first: int | None = None) -> list[int]:
        cards = [v + 1 for v in range(10) for _ in range(int(counts[v]))]
        if first is not None:  # the dealer's shown card leads its hand
            cards.remove(first)
            cards.insert(0, first)
        return cards

    obs, info = pool.reset()
    rewards = collections.Counter()
    for _ in range(20):
        actions = rng.integers(0, 2, size=num_envs)
        dealer_before = info["dealer_cards"].copy()
        new_obs, reward, terminated, truncated, info = pool.step(actions)
        for i in range(num_envs):
            player = hand(info["player_cards"][i])
            dealer = hand(info["dealer_cards"][i], first=int(obs[i][1]))
            assert tuple(new_obs[i]) == (gym_blackjack.sum_hand(player), dealer[0],
                                         gym_blackjack.usable_ace(player))
            ref.player, ref.dealer = list(player), list(dealer)
            if actions[i] == 1:
                np.testing.assert_array_equal(info["dealer_cards"][i], dealer_before[i])
                assert bool(terminated[i]) == gym_blackjack.is_bust(player)
                assert reward[i] == (-1.0 if terminated[i] else 0.0)
            else:
                # The dealer drew to 17 or more; Gymnasium's own step then scores the hands
                # without drawing (its loop stops at 17).
                assert gym_blackjack.sum_hand(dealer) >= 17
                _, r_rew, r_term, _, _ = ref.step(0)
                assert r_term and bool(terminated[i])
                assert reward[i] == r_rew, (player, dealer, options)
            rewards[float(reward[i])] += 1
        obs = new_obs
        done = terminated | truncated
        if done.any():
            ids = np.flatnonzero(done)
            r_obs, r_info = pool.reset(ids)
            obs[ids] = r_obs
            for key in ("player_cards", "dealer_cards"):
                info[key][ids] = r_info[key]
    assert {-1.0, 0.0, 1.0} <= set(rewards)
    if options.get("natural") and not options.get("sab", True):
        assert rewards[1.5] > 0


def test_blackjack_deals_from_an_infinite_deck() -> None:
    num_envs = 4000
    pool = make("Blackjack-v1", num_envs=num_envs, seed=13)
    values = np.zeros(10)
    for _ in range(3):
        _, info = pool.reset()
        values += info["player_cards"].sum(0) + info["dealer_cards"].sum(0)
    n = values.sum()
    assert n == 3 * num_envs * 4
    expected = n * np.array([1] * 9 + [4]) / 13
    assert _chi2(values, expected) < _chi2_limit(9)


@pytest.mark.parametrize("env_id,options", [
    ("FrozenLake8x8-v1", {}), ("CliffWalkingSlippery-v1", {}),
    ("Taxi-v4", {"is_rainy": True, "fickle_passenger": True}), ("Blackjack-v1", {})])
def test_same_seed_same_trajectories_whatever_num_threads(env_id: str, options: dict) -> None:
    def run(num_threads: int, seed: int) -> np.ndarray:
        pool = make(env_id, num_envs=16, num_threads=num_threads, seed=seed, **options)
        rng = np.random.default_rng(0)
        out = [pool.reset()[0]]
        for _ in range(100):
            out.append(pool.step(rng.integers(0, pool.action_space.n, size=16))[0])
        return np.stack(out)

    a = run(1, 21)
    np.testing.assert_array_equal(a, run(2, 21))
    assert not np.array_equal(a, run(1, 22))


@pytest.mark.parametrize("env_id,action", [("FrozenLake-v1", 4), ("Taxi-v4", 6),
                                           ("Blackjack-v1", -1), ("CliffWalking-v1", 7)])
def test_bad_actions_are_refused(env_id: str, action: int) -> None:
    pool = make(env_id, num_envs=2, seed=0)
    pool.reset()
    with pytest.raises(ValueError, match="out of range"):
        pool.step(np.array([0, action]))


@pytest.mark.parametrize("env_id,options,name", [
    ("FrozenLake-v1", {"map_name": "5x5"}, "map_name"),
    ("FrozenLake-v1", {"desc": "SFF,FG"}, "desc"),
    ("FrozenLake-v1", {"desc": "FFFG"}, "desc"),
    ("FrozenLake-v1", {"success_rate": 1.5}, "success_rate"),
    ("FrozenLake-v1", {"reward_schedule": 1}, "reward_schedule"),
    ("Taxi-v4", {"rainy_probability": -0.1}, "rainy_probability"),
    ("Taxi-v4", {"is_raining": True}, "is_raining"),
    ("CliffWalking-v1", {"slippery": True}, "slippery"),
    ("Blackjack-v1", {"naturals": True}, "naturals"),
])
def test_bad_options_are_refused_by_name(env_id: str, options: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        make(env_id, num_envs=1, **options)



def _success_within(env_id: str, horizon: int, policy: list[int] | None = None) -> float:
    """Probability of reaching the goal from the start within ``horizon`` steps, computed on
    Gymnasium's own transition table: under ``policy`` (an action per cell), or under the best
    policy when it is None (backward induction: the ceiling of any learned policy)."""
    table = gymnasium.make(env_id).unwrapped.P
    value = np.zeros(len(table))

    def q(s: int, a: int) -> float:
        return sum(p * (r + (0.0 if done else value[s2])) for p, s2, r, done in table[s][a])

    for _ in range(horizon):
        value = np.array([q(s, policy[s]) if policy is not None else max(q(s, a) for a in table[s])
                          for s in range(len(table))])
    return float(value[0])


@pytest.mark.slow
def test_ppo_preset_solves_slippery_frozen_lake(tmp_path) -> None:
    """The CLI's PPO preset for FrozenLake-v1 (conf/algo_env/ppo_FrozenLake-v1.yaml; slippery,
    Gymnasium's default) learns a greedy policy that reaches the goal with probability >= 0.7
    within the 100-step limit (Gymnasium's reward_threshold; the best policy: 0.744, random
    moves: ~0.015). The probability is computed exactly from the trained actor's action in each
    cell and Gymnasium's transition table, so evaluation episodes add no noise to the bar."""
    import torch
    from _cli import run_cli
    from omegaconf import OmegaConf
    from tensordict import TensorDict
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    from torchfrag.algos import factory_from_config
    from torchfrag.algos.loop import close_loop, eval_policy, load_training_state
    from torchfrag.runtime.checkpoint import load_checkpoint

    assert _success_within("FrozenLake-v1", 100) == pytest.approx(0.744, abs=1e-3)
    run_dir = tmp_path / "run"
    proc = run_cli(["env=FrozenLake-v1", "eval_episodes=0", "progress=false", "plot=false",
                    "logger=none", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    assert cfg.env.options == {} and cfg.algo.total_frames == 150_000  # slippery, as Gymnasium's
    loop = factory_from_config(OmegaConf.to_container(cfg.algo, resolve=True), cfg.env.id)()
    try:
        load_training_state(loop, load_checkpoint(str(run_dir / "checkpoints" / "latest.pt"))["state"])
        with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
            cells = TensorDict(observation=torch.eye(16), batch_size=[16])
            policy = eval_policy(loop)(cells)["action"].tolist()
    finally:
        close_loop(loop)
    success = _success_within("FrozenLake-v1", 100, policy)
    assert success >= spec("FrozenLake-v1").reward_threshold, f"greedy policy {policy}: {success:.3f}"
