"""PoolCollector: layout, continuity, no lost frames, weights, errors, determinism."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

pytest.importorskip("torchrl")

from torchrl.collectors import BaseCollector  # noqa: E402

from torchfrag.collectors import PoolCollector  # noqa: E402

# Debug-v0 observation: [env index, step in episode, last action, episode count].
ENV, STEP, LAST_ACTION, EPISODE = range(4)


def _check_continuity(batches: list[TensorDict], num_envs: int, episode_length: int) -> int:
    """Asserts each row is its env's consecutive steps; returns frames seen."""
    data = torch.cat(batches, dim=1)  # [num_envs, total T]
    obs, nxt = data["observation"], data["next", "observation"]
    done = data["next", "done"].squeeze(-1)
    assert (obs[..., ENV] == torch.arange(num_envs)[:, None]).all()
    assert (nxt[..., ENV] == torch.arange(num_envs)[:, None]).all()
    # Each transition advances the episode step by one.
    assert (nxt[..., STEP] == obs[..., STEP] + 1).all()
    # Episodes end exactly at episode_length, and nowhere else.
    assert torch.equal(done, nxt[..., STEP] == episode_length)
    # The next root continues the previous "next" (or starts a new episode).
    cont = ~done[:, :-1]
    assert torch.equal(obs[:, 1:][cont], nxt[:, :-1][cont])
    assert (obs[:, 1:][~cont][:, STEP] == 0).all()
    assert torch.equal(obs[:, 1:][~cont][:, EPISODE], nxt[:, :-1][~cont][:, EPISODE] + 1)
    # No step appears twice: (env, episode, step) triples are unique and complete.
    first = obs[:, 0]
    ep0, st0 = first[:, EPISODE], first[:, STEP]
    expected = ep0[:, None] * episode_length + st0[:, None] + torch.arange(obs.shape[1])
    assert torch.equal(obs[..., EPISODE] * episode_length + obs[..., STEP], expected)
    # traj ids: constant within an episode, new at every episode start.
    traj = data["collector", "traj_ids"]
    same_ep = obs[:, 1:, EPISODE] == obs[:, :-1, EPISODE]
    assert torch.equal(traj[:, 1:] == traj[:, :-1], same_ep)
    return data.numel()


def test_is_torchrl_collector_and_layout() -> None:
    c = PoolCollector("CartPole-v1", None, num_envs=6, batch_size=3, frames_per_batch=60,
                      total_frames=180)
    assert isinstance(c, BaseCollector)
    assert len(c) == 3
    batches = list(c)
    assert len(batches) == 3
    b = batches[0]
    assert b.batch_size == (6, 10)
    assert b.names == [None, "time"]
    for key in ["observation", "action", "done", "terminated", "truncated",
                ("collector", "traj_ids"), ("next", "observation"), ("next", "reward"),
                ("next", "done"), ("next", "terminated"), ("next", "truncated")]:
        assert key in b.keys(True), key
    assert b["next", "reward"].shape == (6, 10, 1)
    assert b["next", "reward"].dtype == torch.float32
    assert b["next", "done"].shape == (6, 10, 1)
    assert not b["done"].any()
    # No zero-reward transition at episode boundaries.
    assert (torch.cat([x["next", "reward"] for x in batches], 1) == 1).all()
    assert b["observation"].is_contiguous()
    c.shutdown()
    assert c.pool.closed


@pytest.mark.parametrize("deterministic", [False, True])
def test_envs_contiguous_and_ordered(deterministic: bool) -> None:
    n, length = 8, 7
    c = PoolCollector("Debug-v0", None, num_envs=n, batch_size=4, frames_per_batch=n * 5,
                      total_frames=n * 5 * 12, deterministic=deterministic,
                      episode_length=length)
    batches = list(c)
    _check_continuity(batches, n, length)
    c.shutdown()


@pytest.mark.parametrize("deterministic", [False, True])
def test_no_frame_lost_or_duplicated_100k(deterministic: bool) -> None:
    n, length = 16, 13
    c = PoolCollector("Debug-v0", None, num_envs=n, batch_size=4, frames_per_batch=n * 64,
                      total_frames=100_000, deterministic=deterministic, episode_length=length,
                      num_threads=2)
    batches = list(c)
    frames = _check_continuity(batches, n, length)
    assert frames == sum(b.numel() for b in batches) >= 100_000
    assert c._frames == frames
    c.shutdown()


def test_uneven_env_speeds_overflow_slots() -> None:
    # Env 0 is slow; the others run ahead into the next batch's slots.
    n, length = 6, 5
    sleeps = [2000] + [0] * (n - 1)
    c = PoolCollector("Debug-v0", None, num_envs=n, batch_size=2, frames_per_batch=n * 4,
                      total_frames=n * 4 * 8, episode_length=length, step_sleep_us=sleeps,
                      num_threads=2)
    batches = list(c)
    _check_continuity(batches, n, length)
    c.shutdown()


def test_slots_overflow_grows_and_rotates() -> None:
    from torchfrag.collectors.pool_collector import _Slots

    slots = _Slots(num_envs=2, steps=3)
    slots.add("x", (), torch.int64)
    counts = np.zeros(2, dtype=np.int64)
    # Env 1 runs 9 steps ahead (three batches' worth), env 0 just 3.
    for step in range(9):
        ids = np.array([1] if step >= 3 else [0, 1])
        pos = counts[ids]
        slots.write("x", ids, pos, ids * 100 + pos, int(pos.max()))
        counts[ids] += 1
    assert slots.over_cap >= 6
    out = slots.rotate(counts)
    assert out["x"].tolist() == [[0, 1, 2], [100, 101, 102]]
    counts -= 3
    assert slots.main["x"][1].tolist() == [103, 104, 105]
    assert slots.over["x"][1, :3].tolist() == [106, 107, 108]


class _ConstPolicy(nn.Module):
    """Debug-v0 policy: action = round(sigmoid(bias)) for every env."""

    def __init__(self, bias: float) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.tensor(bias))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return (self.bias > 0).long().expand(observation.shape[0]).clone()


def test_weight_updates_reach_the_policy() -> None:
    policy = _ConstPolicy(-1.0)
    c = PoolCollector("Debug-v0", policy, num_envs=4, batch_size=2, frames_per_batch=40,
                      total_frames=400, episode_length=1000)
    it = iter(c)
    b0 = next(it)
    assert (b0["action"] == 0).all()
    new = _ConstPolicy(1.0)
    c.update_policy_weights_(new)
    assert policy.bias.item() == 1.0
    next(it)  # may hold a few steps sent before the update
    b2 = next(it)
    assert (b2["action"] == 1).all()
    # The env received them: its "last action" observation follows.
    assert (b2["next", "observation"][..., LAST_ACTION] == 1).all()
    # TensorDict weights work too.
    c.update_policy_weights_(TensorDict({"bias": torch.tensor(-1.0)}, []))
    next(it)
    assert (next(it)["action"] == 0).all()
    assert c.policy_version == 2
    c.shutdown()


def test_deterministic_mode_is_fully_on_policy() -> None:
    policy = _ConstPolicy(-1.0)
    c = PoolCollector("Debug-v0", policy, num_envs=4, batch_size=2, frames_per_batch=40,
                      total_frames=400, deterministic=True, episode_length=1000)
    it = iter(c)
    assert (next(it)["action"] == 0).all()
    c.update_policy_weights_(_ConstPolicy(1.0))
    assert (next(it)["action"] == 1).all()
    c.shutdown()


def test_policy_exception_surfaces_and_closes_pool() -> None:
    calls = {"n": 0}

    def bad_policy(obs: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] == 25:
            raise ValueError("policy exploded")
        return torch.zeros(obs.shape[0], dtype=torch.int64)

    c = PoolCollector("CartPole-v1", bad_policy, num_envs=8, batch_size=4,
                      frames_per_batch=80, total_frames=10_000)
    with pytest.raises(ValueError, match="policy exploded"):
        for _ in c:
            pass
    assert c.pool.closed
    c.shutdown()  # idempotent


def test_env_exception_surfaces_and_closes_pool() -> None:
    from torchfrag.envs import EnvError

    c = PoolCollector("Debug-v0", None, num_envs=4, batch_size=2, frames_per_batch=40,
                      total_frames=10_000, fail_on_step=[0, 0, 30, 0], episode_length=100)
    with pytest.raises(EnvError):
        list(c)
    assert c.pool.closed


def _seeded_stochastic_policy() -> TensorDictSequential:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))

    def sample(logits: torch.Tensor) -> torch.Tensor:
        return torch.distributions.Categorical(logits=logits).sample()

    return TensorDictSequential(TensorDictModule(net, ["observation"], ["logits"]),
                                TensorDictModule(sample, ["logits"], ["action"]))


def _collect(deterministic: bool, seed: int = 3) -> TensorDict:
    policy = _seeded_stochastic_policy()
    torch.manual_seed(seed)
    c = PoolCollector("CartPole-v1", policy, num_envs=8, batch_size=4, frames_per_batch=160,
                      total_frames=1600, deterministic=deterministic, seed=seed, num_threads=2)
    data = torch.cat(list(c), 1)
    c.shutdown()
    return data


def test_deterministic_mode_is_bit_reproducible() -> None:
    a, b = _collect(True), _collect(True)
    assert (a == b).all()
    assert "logits" in a.keys()
    assert a["logits"].shape == (8, 200, 2)


def test_policy_kinds() -> None:
    # plain nn.Module on the observation tensor
    net = nn.Sequential(nn.Linear(4, 2))

    class Argmax(nn.Module):
        def forward(self, observation: torch.Tensor) -> torch.Tensor:
            return net(observation).argmax(-1)

    for policy in (Argmax(), lambda obs: torch.ones(obs.shape[0], dtype=torch.int64),
                   TensorDictModule(Argmax(), ["observation"], ["action"]), None):
        c = PoolCollector("CartPole-v1", policy, num_envs=4, frames_per_batch=40,
                          total_frames=80)
        out = list(c)
        assert len(out) == 2 and out[0].batch_size == (4, 10)
        c.shutdown()


def test_continuous_actions_and_infos() -> None:
    c = PoolCollector("Pendulum-v1", None, num_envs=4, batch_size=2, frames_per_batch=40,
                      total_frames=400, info_keys=["elapsed_step"])
    data = torch.cat(list(c), 1)
    assert data["action"].shape == (4, 100, 1)
    assert data["action"].dtype == torch.float32
    assert (data["action"].abs() <= 2).all()
    el, nel = data["elapsed_step"], data["next", "elapsed_step"]
    assert (nel == el + 1).all()
    assert torch.equal(data["next", "truncated"].squeeze(-1), nel == 200)
    c.shutdown()


def test_bad_policy_output() -> None:
    c = PoolCollector("CartPole-v1", lambda obs: torch.zeros(obs.shape[0], 3), num_envs=4,
                      frames_per_batch=40, total_frames=80)
    with pytest.raises(ValueError, match="expected"):
        list(c)
    assert c.pool.closed


def test_replay_buffer() -> None:
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(1000, ndim=2))
    c = PoolCollector("CartPole-v1", None, num_envs=4, frames_per_batch=40, total_frames=120,
                      replay_buffer=rb)
    assert list(c) == [None, None, None]
    assert len(rb) == 120
    assert rb.sample(8)["observation"].shape == (8, 4)
    c.shutdown()


def test_state_dict_and_seed() -> None:
    policy = _ConstPolicy(1.0)
    c = PoolCollector("CartPole-v1", policy, num_envs=2, frames_per_batch=8, total_frames=16)
    list(c)
    sd = copy.deepcopy(c.state_dict())
    assert sd["frames"] == 16
    policy.bias.data.fill_(-3.0)
    c.load_state_dict(sd)
    assert policy.bias.item() == 1.0
    assert c.set_seed(5) == 5
    c.shutdown()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_policy_and_storage() -> None:
    net = nn.Linear(4, 2).cuda()
    c = PoolCollector("CartPole-v1", lambda o: net(o).argmax(-1), num_envs=4,
                      frames_per_batch=40, total_frames=80, policy_device="cuda",
                      storing_device="cuda")
    out = list(c)
    assert out[0]["observation"].device.type == "cuda"
    c.shutdown()


def test_atari_if_available() -> None:
    from torchfrag.envs import list_envs

    if "Pong-v5" not in list_envs():
        pytest.skip("Atari envs not built")
    c = PoolCollector("Pong-v5", None, num_envs=4, batch_size=2, frames_per_batch=32,
                      total_frames=64)
    out = list(c)
    assert out[0]["observation"].dtype == torch.uint8
    assert out[0]["next", "observation"].shape[:2] == (4, 8)
    c.shutdown()


def test_mujoco_if_available() -> None:
    from torchfrag.envs import list_envs

    if "HalfCheetah-v5" not in list_envs():
        pytest.skip("MuJoCo envs not built")
    c = PoolCollector("HalfCheetah-v5", None, num_envs=4, batch_size=2, frames_per_batch=32,
                      total_frames=64)
    out = list(c)
    # float32 by default (what TorchRL scripts' DoubleToFloat gives); the env's own on request
    assert out[0]["observation"].dtype == torch.float32
    assert out[0]["action"].shape == (4, 8, 6)
    c.shutdown()
