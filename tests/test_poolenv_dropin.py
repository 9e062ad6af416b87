"""PoolEnv behaves like TorchRL's own envs: pickling, subclass overrides, Atari explicit resets."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

pytest.importorskip("torchrl")

from tensordict import TensorDictBase  # noqa: E402

from torchfrag.envs import PoolEnv, list_envs, make  # noqa: E402


def test_pickle_rebuilds_from_arguments() -> None:
    env = PoolEnv("Pendulum-v1", 3, seed=7, info_keys=[])
    copy = pickle.loads(pickle.dumps(env))
    assert copy is not env and copy.pool is not env.pool
    assert copy.batch_size == env.batch_size and copy.info_keys == []
    assert copy.observation_spec == env.observation_spec
    a = env.rollout(20, break_when_any_done=False)
    b = copy.rollout(20, break_when_any_done=False)
    # Same seed: same initial states (random actions differ, so compare the first obs).
    assert torch.equal(a["observation"][:, 0], b["observation"][:, 0])
    env.close()
    copy.close()


class _CountingEnv(PoolEnv):
    """A user subclass that rewrites the reward and counts calls."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.steps = 0
        self.resets = 0

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.steps += 1
        out = super()._step(tensordict)
        out["reward"] = torch.full_like(out["reward"], 2.5)
        return out

    def _reset(self, tensordict=None, **kwargs):
        self.resets += 1
        return super()._reset(tensordict, **kwargs)


@pytest.mark.parametrize("kind", ["rollout", "step_and_maybe_reset"])
def test_subclass_overrides_are_honoured(kind: str) -> None:
    env = _CountingEnv("CartPole-v1", 4, seed=0)
    if kind == "rollout":
        td = env.rollout(300, break_when_any_done=False)
        rewards = td["next", "reward"]
        assert env.steps == 300
        assert bool(td["next", "done"].any())
        assert env.resets > 1  # partial resets went through the override too
    else:
        carry = env.reset()
        rewards = []
        for _ in range(50):
            carry["action"] = env.action_spec.rand()
            td, carry = env.step_and_maybe_reset(carry)
            rewards.append(td["next", "reward"])
        rewards = torch.stack(rewards)
        assert env.steps == 50
    assert bool((rewards == 2.5).all())
    env.close()


def test_plain_env_keeps_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    env = PoolEnv("CartPole-v1", 2, seed=0)
    called = []
    monkeypatch.setattr(PoolEnv, "_fast_rollout",
                        lambda self, *a, **k: called.append(1) or "fast")
    assert env.rollout(5, break_when_any_done=False) == "fast"
    assert called
    env.close()


@pytest.mark.skipif("Breakout-v5" not in list_envs(), reason="Atari not built")
def test_atari_episodic_life_explicit_reset_starts_a_new_game_like_envpool() -> None:
    envpool = pytest.importorskip("envpool")
    kw = dict(episodic_life=True, noop_max=1, repeat_action_probability=0.0)
    ref = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=1, seed=0, **kw)
    ours = make("Breakout-v5", num_envs=1, seed=0, **kw)
    rng = np.random.default_rng(0)
    for env in (ref, ours):
        _, info = env.reset()
        assert int(info["lives"][0]) == 5
    lost = {}
    for name, env in (("envpool", ref), ("ours", ours)):
        rng = np.random.default_rng(0)
        for _ in range(5000):
            _, _, term, trunc, info = env.step(rng.integers(0, 4, 1))
            if term[0] or trunc[0]:
                break
        lost[name] = int(info["lives"][0])
        _, info = env.reset()
        assert int(info["lives"][0]) == 5, name  # explicit reset: new game, all lives
    assert lost["envpool"] == lost["ours"] == 4
    ref.close()
    ours.close()


@pytest.mark.skipif("Breakout-v5" not in list_envs(), reason="Atari not built")
def test_atari_episodic_life_auto_reset_continues_the_game() -> None:
    env = make("Breakout-v5", num_envs=1, seed=0, episodic_life=True)
    env.reset()
    rng = np.random.default_rng(1)
    for _ in range(5000):
        _, _, term, trunc, info = env.step(rng.integers(0, 4, 1))
        if term[0] or trunc[0]:
            break
    assert int(info["lives"][0]) == 4
    _, _, _, _, info = env.step(np.zeros(1, dtype=np.int64))  # next-step auto-reset
    assert int(info["lives"][0]) == 4
    env.close()


@pytest.mark.skipif("Breakout-v5" not in list_envs(), reason="Atari not built")
def test_atari_reset_with_seed_is_reproducible_after_life_loss() -> None:
    env = make("Breakout-v5", num_envs=1, seed=0, episodic_life=True)
    first, _ = env.reset(seed=3)
    first = first.copy()
    rng = np.random.default_rng(2)
    for _ in range(5000):
        _, _, term, trunc, _ = env.step(rng.integers(0, 4, 1))
        if term[0] or trunc[0]:
            break
    again, _ = env.reset(seed=3)
    np.testing.assert_array_equal(first, again)
    env.close()
