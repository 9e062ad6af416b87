"""Torch-native batched envs (torchfrag.envs.batched) against Gymnasium, step for step.

As for the C++ envs (tests/test_classic_control.py): after each reset the
reference env's state is set to ours (``env.state``), then both step with the
same random actions, over several episodes, through our TorchRL face
(``step_and_maybe_reset``, same-step auto-reset). Device tests run on every
device present: CUDA cases carry the ``cuda`` mark and skip without CUDA
(``pytest -m cuda`` runs only them).
"""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.envs.utils import check_env_specs

from torchfrag.envs import PoolEnv, spec
from torchfrag.envs.batched import ENVS, BatchedEnv, list_envs, make
from torchfrag.envs.batched.rng import counter_uniform, env_seeds
from torchfrag.fragments import Rollout

ENV_IDS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _device(name: str) -> torch.device:
    if name.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    return torch.device(name)


def _ref_obs(ref: gymnasium.Env, env_id: str) -> np.ndarray:
    inner = ref.unwrapped
    if env_id == "Pendulum-v1":
        return inner._get_obs()
    if env_id == "Acrobot-v1":
        return inner._get_ob()
    return np.array(inner.state, dtype=np.float32)


def _sync(ref: gymnasium.Env, state: torch.Tensor) -> None:
    ref.unwrapped.state = state.cpu().numpy().astype(np.float64)


def _random_actions(space: gymnasium.Space, rng: np.random.Generator, n: int) -> np.ndarray:
    if isinstance(space, gymnasium.spaces.Discrete):
        return rng.integers(0, space.n, size=n)
    # Include out-of-bounds actions: both sides must clip them the same way.
    return rng.uniform(-1.5 * space.high, 1.5 * space.high, size=(n, *space.shape)).astype(np.float32)


def test_registry_matches_the_cpp_envs() -> None:
    assert list_envs() == sorted(ENV_IDS)
    for env_id in ENV_IDS:
        env = make(env_id, 2)
        pool = PoolEnv(env_id, 2, info_keys=[], categorical_action_encoding=True)
        try:
            # Same options (names, defaults, per-env flags) and specs as the C++ pool.
            assert env.pool_spec.options == spec(env_id).options
            assert env.observation_spec == pool.observation_spec
            assert env.action_spec == pool.action_spec
            assert env.max_episode_steps == gymnasium.spec(env_id).max_episode_steps
        finally:
            pool.close()
    with pytest.raises(ValueError, match="no torch-native env 'Pong-v5'"):
        make("Pong-v5")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_matches_gymnasium(env_id: str, device: str) -> None:
    dev = _device(device)
    rng = np.random.default_rng(0)
    num_envs, episodes_per_env = 3, 2
    env = make(env_id, num_envs, seed=7, device=dev)
    refs = [gymnasium.make(env_id) for _ in range(num_envs)]
    carry = env.reset()
    state = env.state
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
        _sync(ref, state[i])
        np.testing.assert_allclose(carry["observation"][i].cpu().numpy(), _ref_obs(ref, env_id),
                                   atol=1e-6)
    finished = np.zeros(num_envs, dtype=int)
    steps = 0
    space = refs[0].action_space
    while (finished < episodes_per_env).any():
        actions = _random_actions(space, rng, num_envs)
        before, elapsed, episode = env._state, env._elapsed, env._episode
        carry["action"] = torch.as_tensor(actions, device=dev)
        td, carry = env.step_and_maybe_reset(carry)
        # The float64 rewards of the kernel, before the float32 TorchRL entry.
        _, reward64, _ = env.dynamics(before, env._action(carry.get("action", td["action"])),
                                      elapsed, episode)
        steps += 1
        nxt = td["next"]
        for i, ref in enumerate(refs):
            if finished[i] >= episodes_per_env:
                continue
            a = int(actions[i]) if actions.ndim == 1 else actions[i]
            r_obs, r_rew, r_term, r_trunc, _ = ref.step(a)
            np.testing.assert_allclose(nxt["observation"][i].cpu().numpy(), r_obs, rtol=1e-5,
                                       atol=1e-5, err_msg=f"{env_id} env {i} step {steps}")
            assert float(reward64[i]) == pytest.approx(r_rew, rel=1e-9, abs=1e-9), (env_id, i, steps)
            assert float(nxt["reward"][i, 0]) == pytest.approx(r_rew, rel=1e-6, abs=1e-6)
            assert bool(nxt["terminated"][i, 0]) == r_term, (env_id, i, steps)
            assert bool(nxt["truncated"][i, 0]) == r_trunc, (env_id, i, steps)
            assert bool(nxt["done"][i, 0]) == (r_term or r_trunc)
        done = nxt["done"].squeeze(-1).cpu().numpy()
        assert not carry["done"].any()
        if done.any():
            finished += done
            state = env.state
            for i in np.flatnonzero(done):
                # Same-step auto-reset: the carry already holds the new episode's first obs.
                refs[i].reset()
                _sync(refs[i], state[i])
                np.testing.assert_allclose(carry["observation"][i].cpu().numpy(),
                                           _ref_obs(refs[i], env_id), atol=1e-6)
                assert int(env.elapsed[i]) == 0
    assert steps > 10


def test_truncation_at_limit() -> None:
    env = make("Pendulum-v1", 2, max_episode_steps=5)
    carry = env.reset()
    for t in range(1, 11):
        carry["action"] = torch.zeros(2, 1)
        td, carry = env.step_and_maybe_reset(carry)
        assert not td["next", "terminated"].any()
        assert bool(td["next", "truncated"].all()) == (t % 5 == 0)
        assert (env.elapsed == t % 5).all()


def test_per_env_physical_parameters() -> None:
    """One value per env (domain randomisation): each env follows Gymnasium built with its values."""
    values = [(0.0, 1.0), (10.0, 1.0), (10.0, 2.0)]
    env = make("Pendulum-v1", 3, g=[v[0] for v in values], m=[v[1] for v in values], seed=3)
    carry = env.reset()
    state = env.state
    refs = []
    for i, (g, m) in enumerate(values):
        ref = gymnasium.make("Pendulum-v1", g=g).unwrapped
        ref.m = m
        ref.reset(seed=0)
        ref.state = state[i].numpy().copy()
        refs.append(ref)
    for _ in range(20):
        carry["action"] = torch.full((3, 1), 1.5)
        td, carry = env.step_and_maybe_reset(carry)
        for i, ref in enumerate(refs):
            r_obs, r_rew, *_ = ref.step(np.array([1.5], dtype=np.float32))
            np.testing.assert_allclose(td["next", "observation"][i].numpy(), r_obs, atol=1e-6)
            assert float(td["next", "reward"][i, 0]) == pytest.approx(r_rew, rel=1e-6)
    # Different parameters give different dynamics from the same state.
    assert not torch.allclose(td["next", "observation"][0], td["next", "observation"][1])


def test_cartpole_options_match_gymnasium_attributes() -> None:
    env = make("CartPole-v1", 1, gravity=3.0, length=0.8, force_mag=5.0,
               kinematics_integrator="semi-implicit", sutton_barto_reward=True)
    ref = gymnasium.make("CartPole-v1", sutton_barto_reward=True).unwrapped
    ref.gravity, ref.length, ref.force_mag = 3.0, 0.8, 5.0
    ref.polemass_length = ref.masspole * ref.length
    ref.kinematics_integrator = "semi-implicit"
    carry = env.reset()
    ref.reset(seed=0)
    ref.state = env.state[0].numpy().copy()
    for a in [0, 1, 1, 0, 1, 1, 1] + [0] * 100:
        carry["action"] = torch.tensor([a])
        td, carry = env.step_and_maybe_reset(carry)
        r_obs, r_rew, r_term, *_ = ref.step(a)
        np.testing.assert_allclose(td["next", "observation"][0].numpy(), r_obs, atol=1e-6)
        assert float(td["next", "reward"][0, 0]) == r_rew
        if r_term:
            break
    assert r_term, "the fixed action sequence should topple the pole"


def test_acrobot_nips_and_torque_noise() -> None:
    env = make("Acrobot-v1", 1, book_or_nips="nips")
    ref = gymnasium.make("Acrobot-v1").unwrapped
    ref.book_or_nips = "nips"
    carry = env.reset()
    ref.reset(seed=0)
    ref.state = env.state[0].numpy().copy()
    for a in [0, 2, 2, 1, 0, 0, 2, 2, 2, 1]:
        carry["action"] = torch.tensor([a])
        td, carry = env.step_and_maybe_reset(carry)
        r_obs, *_ = ref.step(a)
        np.testing.assert_allclose(td["next", "observation"][0].numpy(), r_obs, atol=1e-5)
    # Torque noise: seeded per env and episode, so reproducible, and it changes the dynamics.
    runs = []
    for noise in (0.0, 0.5, 0.5):
        e = make("Acrobot-v1", 4, seed=1, torque_noise_max=noise)
        runs.append(e.rollout(30, lambda td: td.set("action", torch.ones(4, dtype=torch.int64)),
                              break_when_any_done=False)["next", "observation"])
    assert torch.equal(runs[1], runs[2])
    assert not torch.allclose(runs[0], runs[1])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_specs_and_rollout(env_id: str) -> None:
    env = make(env_id, 4, seed=0)
    check_env_specs(env)
    td = env.rollout(20, break_when_any_done=False)
    assert td.batch_size == (4, 20)
    assert td["next", "reward"].shape == (4, 20, 1) and td["next", "reward"].dtype == torch.float32
    assert td["next", "observation"].dtype == torch.float32
    env.close()


def test_seeding_is_per_env_and_reproducible() -> None:
    a = make("CartPole-v1", 8, seed=5).reset()["observation"]
    b = make("CartPole-v1", 8, seed=5).reset()["observation"]
    c = make("CartPole-v1", 8, seed=6).reset()["observation"]
    small = make("CartPole-v1", 3, seed=5).reset()["observation"]
    assert torch.equal(a, b) and not torch.equal(a, c)
    # Env i's stream depends on (seed, i) only, not on the batch size.
    assert torch.equal(a[:3], small)
    # Explicit per-env seeds and set_seed.
    env = make("CartPole-v1", 2, seed=[11, 12])
    first = env.reset()["observation"]
    env.set_seed(5)
    assert torch.equal(env.reset()["observation"], a[:2])
    assert not torch.equal(first, a[:2])
    with pytest.raises(ValueError, match="got 3 per-env seeds for 2 envs"):
        make("CartPole-v1", 2, seed=[1, 2, 3])


def test_counter_rng_matches_splitmix64_in_python() -> None:
    """The int64 tensor hash is the intended unsigned 64-bit arithmetic (hence the same on every device)."""
    mask = (1 << 64) - 1

    def mix(x: int) -> int:
        x &= mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        return x ^ (x >> 31)

    seeds = env_seeds(123, 4)
    for i in range(4):
        assert int(seeds[i]) & mask == mix(mix(123) + i)
    episode = torch.tensor([0, 1, 2, 3])
    u = counter_uniform(seeds, episode, 7, 3)
    for i in range(4):
        base = (mix((int(seeds[i]) * 0x9E3779B97F4A7C15 + i) & mask) + 7 * 0xD1B54A32D192ED03) & mask
        for j in range(3):
            bits = mix(mix(base) + (j + 1) * 0xABC98388FB8FAC03)
            assert float(u[i, j]) == (bits >> 11) * 2.0 ** -53


def test_partial_reset_serves_the_auto_reset() -> None:
    """A `_reset` after a step that finished an env returns the episode it already started."""
    fast, slow = make("CartPole-v1", 4, seed=2), make("CartPole-v1", 4, seed=2)
    carry_f, td_s = fast.reset(), slow.reset()
    for _ in range(60):
        action = torch.zeros(4, dtype=torch.int64)
        carry_f["action"] = action
        _, carry_f = fast.step_and_maybe_reset(carry_f)
        td_s["action"] = action
        td_s = slow.step(td_s)
        done = td_s["next", "done"]
        td_s = td_s["next"].exclude("reward")
        if done.any():
            td_s = slow.reset(td_s.set("_reset", done))
            td_s = td_s.exclude("_reset")
        torch.testing.assert_close(td_s["observation"], carry_f["observation"], rtol=0, atol=0)
    assert torch.equal(fast._episode, slow._episode) and bool((fast._episode > 0).all())


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown option 'gravty'"):
        make("CartPole-v1", 2, gravty=1.0)
    with pytest.raises(ValueError, match="per-env values for 3 envs"):
        make("Pendulum-v1", 3, g=[1.0, 2.0])
    with pytest.raises(ValueError, match="'x_init' is not a per-env option"):
        make("Pendulum-v1", 2, x_init=[1.0, 2.0])
    with pytest.raises(ValueError, match="kinematics_integrator must be one of"):
        make("CartPole-v1", kinematics_integrator="rk4")
    with pytest.raises(ValueError, match="masspole must be positive"):
        make("CartPole-v1", 2, masspole=[0.1, -1.0])
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        make("CartPole-v1", 0)
    with pytest.raises(ValueError, match="max_episode_steps must be >= 0"):
        make("CartPole-v1", 1, max_episode_steps=-3)
    env = make("CartPole-v1", 2)
    td = env.reset()
    with pytest.raises(ValueError, match=r"actions must be in \[0, 2\), got \[5\]"):
        env.step(td.set("action", torch.tensor([0, 5])))
    with pytest.raises(TypeError, match="discrete actions must be integers"):
        env.step(td.set("action", torch.tensor([0.0, 1.0])))
    with pytest.raises(ValueError, match="expected 2 actions"):
        env.step(td.set("action", torch.tensor([[0, 1], [1, 0]])))
    with pytest.raises(KeyError, match="no 'action' entry"):
        env.step(TensorDict({"observation": td["observation"]}, batch_size=[2]))


def test_rollout_fragment_uses_it_like_the_pool() -> None:
    env = make("Pendulum-v1", 6, seed=0)
    policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
    rollout = Rollout(policy, env, steps=250)
    batch = rollout()
    assert batch.batch_size == (6, 250)
    # 200-step episodes ended once per env inside the rollout, seen by the episode stats.
    assert int(batch["next", "done"].sum()) == 6
    assert rollout.stats.pop()["episodes"] == 6


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_trajectories_on_every_device(env_id: str, device: str) -> None:
    """Seeded on any device, a batch follows the CPU's trajectories (float tolerance)."""
    dev = _device(device)
    n, steps = 64, 300
    gen = torch.Generator().manual_seed(0)
    space = spec(env_id).action_space
    if isinstance(space, gymnasium.spaces.Discrete):
        actions = torch.randint(0, int(space.n), (steps, n), generator=gen)
    else:
        actions = torch.rand((steps, n, 1), generator=gen) * 4 - 2

    def run(env: BatchedEnv) -> dict[str, torch.Tensor]:
        carry = env.reset()
        out: dict[str, list[torch.Tensor]] = {"obs": [], "reward": [], "done": []}
        for t in range(steps):
            carry["action"] = actions[t].to(env.device)
            td, carry = env.step_and_maybe_reset(carry)
            out["obs"].append(td["next", "observation"].cpu())
            out["reward"].append(td["next", "reward"].cpu())
            out["done"].append(td["next", "done"].cpu())
        return {k: torch.stack(v) for k, v in out.items()}

    # Short episodes, so that auto-resets (and their random draws) are compared too.
    ref = run(make(env_id, n, seed=3, max_episode_steps=100))
    on_dev = make(env_id, n, seed=3, device=dev, check_actions=False, max_episode_steps=100)
    got = run(on_dev)
    assert torch.equal(got["done"], ref["done"])
    torch.testing.assert_close(got["obs"], ref["obs"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got["reward"], ref["reward"], rtol=1e-5, atol=1e-5)
    assert int(ref["done"].sum()) >= 2 * n


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_kernel_matches_eager(device: str) -> None:
    """``compile_kernel`` (torch.compile, inductor) keeps the trajectories, and counts its steps."""
    dev = _device(device)
    eager = make("CartPole-v1", 256, seed=4, device=dev)
    compiled = make("CartPole-v1", 256, seed=4, device=dev)
    compiled.compile_kernel()
    ce, cc = eager.reset(), compiled.reset()
    gen = torch.Generator().manual_seed(1)
    dones = 0
    for _ in range(150):
        a = torch.randint(0, 2, (256,), generator=gen).to(dev)
        ce["action"], cc["action"] = a, a
        te, ce = eager.step_and_maybe_reset(ce)
        tc, cc = compiled.step_and_maybe_reset(cc)
        assert torch.equal(te["next", "done"], tc["next", "done"])
        torch.testing.assert_close(tc["next", "observation"], te["next", "observation"])
        torch.testing.assert_close(cc["observation"], ce["observation"])
        dones += int(te["next", "done"].sum())
    assert dones > 256 and compiled.compiled_steps == 150 and eager.compiled_steps == 0


# -- single_device: the fused loop ------------------------------------------------------------
def _greedy_return(actor: torch.nn.Module, device: torch.device, episodes: int = 16) -> float:
    from torchfrag.fragments import Act

    env = make("CartPole-v1", episodes, seed=1000, device=device)
    act = Act(actor, exploration="deterministic")
    total = torch.zeros(episodes, device=device)
    finished = torch.zeros(episodes, dtype=torch.bool, device=device)
    carry = env.reset()
    while not bool(finished.all()):
        transition, carry = env.step_and_maybe_reset(act(carry))
        total += transition["next", "reward"].reshape(episodes) * (~finished)
        finished |= transition["next", "done"].reshape(episodes)
    return float(total.mean())


def _ppo_loop(num_envs: int, steps: int, seed: int = 0, **cfg):
    from torchfrag.algos.ppo import PPOConfig, PPOLoop, make_actor_critic

    torch.manual_seed(seed)
    conf = PPOConfig(num_envs=num_envs, steps=steps, **cfg)
    env = make("CartPole-v1", num_envs, seed=seed)
    actor, critic = make_actor_critic(env, conf.hidden)
    return PPOLoop(env, actor, critic, conf)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_rollout_compiled_equals_eager(device: str) -> None:
    """The compiled whole body (act + env step) gives the eager body's trajectories."""
    from torchfrag.runtime.fused import fuse_rollout

    dev = _device(device)
    runs = []
    for compile in (False, True):
        env = make("CartPole-v1", 32, seed=5, device=dev)
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).to(dev)
        policy = TensorDictModule(lambda obs: net(obs).argmax(-1), ["observation"], ["action"])
        rollout = Rollout(policy, env, steps=40)
        undo = fuse_rollout(rollout, compile=compile)
        try:
            assert not env.check_actions  # no per-step host synchronisation while fused
            batches = [rollout(), rollout(), rollout()]
        finally:
            undo()
        assert env.check_actions
        assert rollout.fused_steps == 120 and rollout.fused_compiled == compile
        runs.append(torch.cat([b["next", "observation"] for b in batches], 1).cpu())
        dones = sum(int(b["next", "done"].sum()) for b in batches)
    assert dones > 32
    torch.testing.assert_close(runs[1], runs[0])


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_single_device_fused_learns_cartpole(device: str) -> None:
    """single_device runs the fused, compiled loop (env, act and learn on one device) and
    PPO solves CartPole with the torch-native env (greedy return >= 475)."""
    from torchfrag.graph import capture
    from torchfrag.policies import SingleDevicePolicy
    from torchfrag.runtime import run

    dev = _device(device)
    torch.set_num_threads(1)
    # the recipe this test was tuned with (PPOConfig's defaults before they became the main job's)
    loop = _ppo_loop(16, 128, minibatch_size=512, lr=1e-3, total_frames=60 * 2048, epochs=10, gamma=0.99,
                     lmbda=0.95, anneal_clip=False)
    best = {"eval": -float("inf"), "iters": 0}

    def hook(i: int, metrics, graph) -> bool:
        best["iters"] = i + 1
        # Inside the run everything lives on the device, env state included.
        assert loop.env._state.device.type == dev.type
        assert next(loop.actor.parameters()).device.type == dev.type
        if (i + 1) % 5 == 0:
            best["eval"] = max(best["eval"], _greedy_return(loop.actor, dev))
            return best["eval"] >= 475
        return False

    res = run(capture(loop), SingleDevicePolicy(device_name=device, compile=True), iterations=60,
              hooks=[hook])
    assert res.extra["device"] == device
    # The fused path ran: every rollout step went through the compiled whole body.
    assert loop.rollout.fused_compiled
    assert loop.rollout.fused_steps == best["iters"] * 128
    assert best["eval"] >= 475, best
    # Afterwards the loop is back where it was.
    assert loop.env._state.device.type == "cpu"


def test_on_device_moves_every_env_through_its_own_to(monkeypatch) -> None:
    """``single_device`` must call each env's ``to``: ``nn.Module.to`` on the loop reaches a
    child env only through ``_apply``, which leaves a BatchedEnv's state where it was (on an
    H100 the fused PPO then met CPU observations with CUDA weights). Checked here with a spy,
    since on a CPU-only machine the target device is the env's own."""
    from torchfrag.graph import capture
    from torchfrag.runtime.placed import on_device

    loop = _ppo_loop(4, 8, minibatch_size=16, total_frames=32)
    calls: list[str] = []
    original = type(loop.env).to

    def spy(self, device):
        calls.append(str(torch.device(device)))
        return original(self, device)

    monkeypatch.setattr(type(loop.env), "to", spy)
    with on_device(capture(loop), "cpu"):
        assert calls == ["cpu"]
    assert calls == ["cpu", "cpu"]  # and back where it was on exit


def test_on_device_moves_a_rollouts_carry_there_and_back() -> None:
    """The carried env state is state too: a replay prefill (DQN, SAC) writes it before the run,
    and on an H100 ``single_device`` then fed those host observations to CUDA weights. Moved
    here to another device than the host's (``meta``), and back; a carry first made during
    the run goes back as well."""
    from types import SimpleNamespace

    from tensordict import TensorDict

    from torchfrag.runtime.placed import _carry_on

    rollout = SimpleNamespace(_carry=TensorDict({"observation": torch.ones(2, 3)}, [2]))
    _carry_on(rollout, torch.device("meta"), torch.device("cpu"))
    assert rollout._carry["observation"].device.type == "meta"
    # (meta tensors cannot come back to the host: the way back is checked with meta as home)
    fresh = SimpleNamespace(_carry=None)  # no carry yet (PPO): the one the run makes goes home
    back = _carry_on(fresh, torch.device("cpu"), torch.device("meta"))
    fresh._carry = TensorDict({"observation": torch.ones(2, 3)}, [2])
    back()
    assert fresh._carry["observation"].device.type == "meta"
    held = SimpleNamespace(_carry=TensorDict({"observation": torch.ones(2, 3)}, [2], device="cpu"))
    back = _carry_on(held, torch.device("cpu"), torch.device("meta"))  # its own device is its home
    back()
    assert held._carry.device.type == "cpu"


def test_single_device_runs_a_loop_whose_prefill_made_the_carry() -> None:
    """DQN with a replay prefill under ``single_device`` on this machine's device: the same code
    as on a GPU (where the carry, left on the host, failed the first fused step)."""
    from torchfrag.algos.dqn import make_dqn
    from torchfrag.graph import capture
    from torchfrag.policies import SingleDevicePolicy
    from torchfrag.runtime import run

    loop = make_dqn("CartPole-v1", {"num_envs": 2, "steps": 4, "learning_starts": 16, "batch_size": 8})
    try:
        assert loop.rollout._carry is not None  # written by the prefill, before any run
        run(capture(loop), SingleDevicePolicy(device_name="cpu", compile=True, compile_backend="eager"),
            iterations=2)
        assert loop.rollout.fused_steps == 8
    finally:
        loop.close()


def test_single_device_keeps_the_cpp_pool_eager() -> None:
    """A rollout over the C++ pool runs counted but not compiled whole (host code in the body)."""
    from torchfrag.algos.ppo import make_ppo
    from torchfrag.graph import capture
    from torchfrag.policies import SingleDevicePolicy
    from torchfrag.runtime import run

    loop = make_ppo("CartPole-v1", {"num_envs": 2, "steps": 8, "minibatch_size": 8})
    try:
        run(capture(loop), SingleDevicePolicy(device_name="cpu", compile=True,
                                              compile_backend="eager"), iterations=2)
    finally:
        loop.close()
    assert loop.rollout.fused_steps == 16 and not loop.rollout.fused_compiled


@pytest.mark.cuda
def test_fused_rollout_never_synchronises_on_cuda() -> None:
    """No host round trip per step: the compiled body runs under CUDA's sync-error mode."""
    from torchfrag.runtime.fused import fuse_rollout

    dev = _device("cuda")
    env = make("CartPole-v1", 1024, seed=0, device=dev)
    net = torch.nn.Linear(4, 2).to(dev)
    rollout = Rollout(TensorDictModule(lambda obs: net(obs).argmax(-1), ["observation"], ["action"]),
                      env, steps=16)
    undo = fuse_rollout(rollout, compile=True)
    try:
        carry = env.reset()
        step = rollout.body_graph.module.forward
        with torch.no_grad():
            for _ in range(3):  # compile (and its syncs) first
                _, carry = step(carry)
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            try:
                for _ in range(50):
                    _, carry = step(carry)
            finally:
                torch.cuda.set_sync_debug_mode("default")
    finally:
        undo()


# -- MuJoCo Warp (optional [gpu] extra) ------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_warp_halfcheetah_against_gymnasium(device: str) -> None:
    """HalfCheetah-v5 on MuJoCo Warp follows Gymnasium's to float32 accuracy over the first steps.

    Warp computes in float32, Gymnasium's MuJoCo in float64: trajectories drift
    apart later (measured on the CPU: ~1e-5 over 7 steps, ~1e-2 by step 30), so
    only the start is compared step for step. On an H100 (torch 2.11, Warp 1.19)
    the GPU solver drifts a little faster: 1.2e-4 by step 4 and 3.5e-4 by step 7,
    in joint velocities of magnitude up to ~8, hence a relative term there.
    """
    pytest.importorskip("warp")
    pytest.importorskip("mujoco_warp")
    dev = _device(device)
    env = make("HalfCheetah-v5", 2, seed=0, device=dev)
    assert env.observation_spec["observation"].shape == (2, 17)
    assert env.observation_spec["observation"].dtype == torch.float64
    carry = env.reset()
    state = env.state.cpu().numpy()
    refs = []
    for i in range(2):
        ref = gymnasium.make("HalfCheetah-v5").unwrapped
        ref.reset(seed=i)
        ref.set_state(state[i, :9], state[i, 9:])
        np.testing.assert_allclose(carry["observation"][i].cpu().numpy(), ref._get_obs(), atol=1e-12)
        refs.append(ref)
    rng = np.random.default_rng(0)
    for t in range(6):
        a = rng.uniform(-1, 1, size=(2, 6)).astype(np.float32)
        carry["action"] = torch.as_tensor(a, device=dev)
        td, carry = env.step_and_maybe_reset(carry)
        for i, ref in enumerate(refs):
            obs, rew, term, trunc, _ = ref.step(a[i])
            np.testing.assert_allclose(td["next", "observation"][i].cpu().numpy(), obs, atol=1e-4,
                                       rtol=1e-4 if dev.type == "cuda" else 0.0,
                                       err_msg=f"step {t}")
            assert float(td["next", "reward"][i, 0]) == pytest.approx(rew, abs=1e-4)
            assert not term and not bool(td["next", "done"][i])
    # Reset noise is seeded: a twin env starts from the same states.
    twin = make("HalfCheetah-v5", 2, seed=0, device=dev)
    twin.reset()
    np.testing.assert_array_equal(twin.state.cpu().numpy(), state)
    with pytest.raises(ValueError, match="not supported by HalfCheetahWarp"):
        make("HalfCheetah-v5", 1, exclude_current_positions_from_observation=False)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_float32_state_follows_float64_for_a_while(env_id: str) -> None:
    """``dtype=torch.float32`` (for accelerators without fast float64) keeps the dynamics."""
    n, steps = 16, 20
    gen = torch.Generator().manual_seed(0)
    space = spec(env_id).action_space
    runs = []
    for dtype in (torch.float64, torch.float32):
        env = make(env_id, n, seed=1, dtype=dtype)
        carry = env.reset()
        obs = []
        gen.manual_seed(0)
        for _ in range(steps):
            if isinstance(space, gymnasium.spaces.Discrete):
                carry["action"] = torch.randint(0, int(space.n), (n,), generator=gen)
            else:
                carry["action"] = torch.rand((n, 1), generator=gen) * 2 - 1
            td, carry = env.step_and_maybe_reset(carry)
            obs.append(td["next", "observation"])
        assert env.state.dtype == dtype
        runs.append(torch.stack(obs))
    torch.testing.assert_close(runs[1], runs[0], rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="dtype must be torch.float32 or torch.float64"):
        make(env_id, 1, dtype=torch.float16)
