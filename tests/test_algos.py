"""The algorithm zoo: every loop captures and runs; A2C, DQN, SAC and IMPALA learn in CI time.

Learning tests train under the local executor until a greedy evaluation
(8 parallel episodes of the deterministic policy, every few iterations)
reaches the threshold, or the frame budget runs out. Budgets are sized to
finish in about a minute each on two shared CPU cores. IMPALA is meant for
``policy=async_actors``; until that policy exists it learns under ``local``.
"""
from __future__ import annotations

import math

import time

import pytest
import torch

from torchfrag.algos import ALGOS, get_algo, make_factory
from torchfrag.algos.ppo import PPOConfig, make_env, make_ppo
from torchfrag.fragments import Act
from torchfrag.graph import capture
from torchfrag.runtime import POLICIES, run

TINY = {
    "ppo": ("CartPole-v1", {"num_envs": 2, "steps": 8, "minibatch_size": 8}),
    "a2c": ("CartPole-v1", {"num_envs": 2, "steps": 8}),
    "dqn": ("CartPole-v1", {"num_envs": 2, "steps": 4, "updates": 2, "batch_size": 8,
                            "learning_starts": 16, "hidden": [16], "target_update_interval": 2}),
    "sac": ("Pendulum-v1", {"num_envs": 2, "steps": 4, "updates": 2, "batch_size": 8,
                            "learning_starts": 16, "hidden": [16]}),
    "impala": ("CartPole-v1", {"num_envs": 2, "steps": 8}),
}
OTHER_POLICIES = ["actors", "async_actors", "central_inference", "data_parallel", "single_device"]


def evaluate(loop, env_id: str, episodes: int = 8, seed: int = 1000) -> float:
    """Mean return of ``episodes`` parallel episodes of the deterministic policy."""
    env = make_env(env_id, episodes, seed=seed)
    act = Act(loop.actor, exploration="deterministic")
    total = torch.zeros(episodes)
    finished = torch.zeros(episodes, dtype=torch.bool)
    try:
        carry = env.reset()
        while not bool(finished.all()):
            transition, carry = env.step_and_maybe_reset(act(carry))
            total += transition["next", "reward"].reshape(episodes) * (~finished)
            finished |= transition["next", "done"].reshape(episodes)
    finally:
        env.close()
    return float(total.mean())


def learn_until(name: str, env_id: str, cfg: dict, threshold: float, every: int, seed: int = 0,
                policy: str = "local") -> tuple[float, int, float]:
    """Trains until the greedy evaluation reaches ``threshold``; returns (best eval, frames, seconds)."""
    torch.set_num_threads(1)
    _, make = get_algo(name)
    loop = make(env_id, cfg, seed=seed)
    # Distributed policies build the loop on their workers from a picklable factory, and
    # frames are collected there: count iterations on the driver.
    factory = make_factory(name, env_id, cfg, seed=seed) if policy != "local" else None
    max_iters = loop.cfg.iterations
    best = {"eval": -float("inf"), "iters": 0}
    t0 = time.perf_counter()

    def hook(i: int, metrics, graph) -> bool:
        best["iters"] = i + 1
        if (i + 1) % every == 0:
            ret = evaluate(loop, env_id)
            best["eval"] = max(best["eval"], ret)
            if ret >= threshold:
                return True
        return i + 1 >= max_iters

    try:
        run(capture(loop), policy=policy, iterations=max_iters, hooks=[hook], factory=factory)
    finally:
        loop.close()
    seconds = time.perf_counter() - t0
    frames = best["iters"] * loop.cfg.frames_per_iteration
    print(f"{name} on {env_id} ({policy}): best eval {best['eval']:.1f} after {frames} frames "
          f"in {seconds:.1f}s")
    return best["eval"], frames, seconds


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_registry_and_config(name: str) -> None:
    config_cls, make = get_algo(name)
    cfg = config_cls.from_dict({"name": name, "total_frames": 123, "unrelated": 1})
    assert cfg.total_frames == 123
    assert config_cls.from_dict(cfg.to_dict()) == cfg
    assert make.__name__ == f"make_{name}"


def test_unknown_algo() -> None:
    with pytest.raises(ValueError, match="unknown algo"):
        get_algo("nope")


# single_device carries the cuda mark: `pytest -m cuda` (benchmarks/gpu_check.sh) runs it on a GPU.
@pytest.mark.parametrize("policy", ["local", *[pytest.param(p, marks=pytest.mark.cuda) if p == "single_device" else p
                                               for p in OTHER_POLICIES]])
@pytest.mark.parametrize("name", sorted(ALGOS))
def test_loop_captures_and_runs(name: str, policy: str) -> None:
    if policy not in POLICIES:
        pytest.skip(f"distribution policy {policy!r} does not exist yet (have {list(POLICIES)})")
    if policy == "single_device" and not torch.cuda.is_available():
        pytest.skip("single_device places everything on CUDA, which this machine lacks")
    env_id, cfg = TINY[name]
    _, make = get_algo(name)
    loop = make(env_id, cfg, seed=0)
    try:
        graph = capture(loop)
        impure = set(graph.impure_nodes)
        assert "rollout" in impure and "learn" in impure
        factory = make_factory(name, env_id, cfg, seed=0)
        result = run(graph, policy=policy, iterations=3, factory=factory)
        assert result.iterations == 3
        metrics = result.output
        assert torch.isfinite(metrics["loss"]).all()
        if policy == "local":
            assert loop.rollout.frames >= 3 * loop.cfg.frames_per_iteration
    finally:
        loop.close()


def _target_params(name: str, loop) -> list:
    if name == "dqn":  # the lean learner holds its target network (copied every interval of steps)
        return list(loop.learn.target.parameters())
    return list(loop.loss.target_qvalue_network_params.values(True, True))


@pytest.mark.parametrize("name", ["dqn", "sac"])
def test_off_policy_graph_has_replay_and_target(name: str) -> None:
    env_id, cfg = TINY[name]
    _, make = get_algo(name)
    loop = make(env_id, {**cfg, "tau": 1.0} if name == "dqn" else cfg, seed=0)  # dqn: hard copies
    try:
        graph = capture(loop)
        names = [n.name for n in graph.nodes]
        assert names.index("write") < names.index("sample") < names.index("learn")
        if name == "sac":
            assert names.index("learn") < names.index("target")
        assert len(loop.buffer) >= cfg["learning_starts"]
        target_before = [p.clone() for p in _target_params(name, loop)]
        run(graph, iterations=2)
        after = _target_params(name, loop)
        assert any(not torch.equal(a, b) for a, b in zip(after, target_before))
        if name == "dqn":  # 2 iterations x 2 updates, a copy every 2 steps: the target is the online net
            assert all(torch.equal(a, b) for a, b in zip(after, loop.learn.net.parameters()))
    finally:
        loop.close()


def test_dqn_epsilon_anneals_and_checkpoint_roundtrip() -> None:
    _, make = get_algo("dqn")
    env_id, cfg = TINY["dqn"]
    loop = make(env_id, {**cfg, "total_frames": 100, "exploration_fraction": 0.5}, seed=0)
    try:
        run(capture(loop), iterations=4)
        eps = float(loop.egreedy.eps)
        assert loop.cfg.eps_end <= eps < loop.cfg.eps_init
        state = loop.training_state()
        other = make(env_id, cfg, seed=1)
        other.load_training_state(state)
        assert float(other.egreedy.eps) == pytest.approx(eps)
        for a, b in zip(loop.qnet.parameters(), other.qnet.parameters()):
            assert torch.equal(a, b)
        other.close()
    finally:
        loop.close()


def test_same_seed_same_run() -> None:
    _, make = get_algo("a2c")
    outs = []
    for _ in range(2):
        loop = make("CartPole-v1", TINY["a2c"][1], seed=3)
        outs.append(run(capture(loop), iterations=3).output["loss"].item())
        loop.close()
    assert outs[0] == outs[1]


def test_sac_rejects_discrete_and_dqn_rejects_continuous() -> None:
    with pytest.raises(ValueError, match="continuous"):
        get_algo("sac")[1]("CartPole-v1", TINY["sac"][1])
    with pytest.raises(ValueError, match="discrete"):
        get_algo("dqn")[1]("Pendulum-v1", TINY["dqn"][1])


def test_dqn_cleanrl_options() -> None:
    from torchrl.modules import MLP

    from torchfrag.algos.dqn import DQNConfig, make_qnet

    env = make_env("CartPole-v1", 2)
    torch.manual_seed(0)
    qnet = make_qnet(env, [8], init="torch")
    torch.manual_seed(0)
    ref = MLP(in_features=4, out_features=2, num_cells=[8], activation_class=torch.nn.ReLU)
    got = [p for p in qnet.parameters()]
    assert len(got) == len(list(ref.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(got, ref.parameters()))
    with pytest.raises(ValueError, match="init must be"):
        make_qnet(env, [8], init="xavier")
    env.close()
    cfg = DQNConfig(num_envs=2, steps=2, learning_starts=8, batch_size=4, updates=1,
                    max_grad_norm=None, adam_eps=1e-8, init="torch")
    loop = get_algo("dqn")[1]("CartPole-v1", cfg)
    assert loop.learn.max_grad_norm is None
    assert loop.learn.optimizer.param_groups[0]["eps"] == 1e-8
    assert math.isfinite(float(loop()["loss"]))
    loop.close()


def test_ppo_on_float64_observations() -> None:
    """MuJoCo observations are float64: the algorithms' env casts them for float32 networks."""
    env = make_env("HalfCheetah-v5", 2)
    assert env.observation_spec["observation"].dtype == torch.float32
    assert env.reset()["observation"].dtype == torch.float32
    env.close()
    loop = get_algo("ppo")[1]("HalfCheetah-v5", {"num_envs": 2, "steps": 8, "minibatch_size": 8,
                                                 "epochs": 1})
    assert math.isfinite(float(run(capture(loop), iterations=2).output["loss_objective"]))
    loop.close()


def test_train_cli_config_for_each_algo(tmp_path) -> None:
    from torchfrag.train import compose_config, train

    for algo, env in [("a2c", "CartPole-v1"), ("dqn", "CartPole-v1"), ("sac", "Pendulum-v1"),
                      ("impala", "CartPole-v1")]:
        cfg = compose_config([f"algo={algo}", f"env={env}", "total_frames=512", "eval_episodes=1",
                              "progress=false", "plot=false", "logger=none", "algo.num_envs=2"]
                             + (["algo.learning_starts=64", "algo.updates=2"] if algo in ("dqn", "sac")
                                else []))
        summary = train(cfg, run_dir=str(tmp_path / algo))
        assert summary["algo"] == algo and summary["frames"] >= 512
        assert len(summary["eval_returns"]) == 1


def test_presets_compose() -> None:
    from torchfrag.train import compose_config

    cfg = compose_config(["algo=ppo_atari", "env=Pong-v5"]) if "Pong-v5" in _envs() else None
    if cfg is not None:
        assert cfg.algo.clip_epsilon == 0.1 and cfg.env.options.reward_clip
    cfg = compose_config(["algo=ppo_mujoco", "env=HalfCheetah-v5"])
    assert cfg.algo.epochs == 10 and cfg.algo.minibatch_size == 64 and cfg.algo.obs_norm
    assert cfg.algo.max_grad_norm is None and cfg.algo.critic_coef == 0.25 and cfg.algo.init_scale == 0.37
    cfg = compose_config(["algo=sac_mujoco", "env=Hopper-v5"])
    assert cfg.algo.learning_starts == 5000 and cfg.algo.name == "sac"
    # CleanRL's networks: with them our SAC needs CleanRL's frames to 3000 on HalfCheetah (docs/benchmarks.md)
    assert cfg.algo.weight_init == "default" and list(cfg.algo.log_std_bounds) == [-5.0, 2.0]
    assert cfg.algo.adam_eps == 1e-8 and cfg.algo.critic_lr == 1e-3 and cfg.algo.lr == 3e-4


def _envs() -> list[str]:
    from torchfrag.envs import list_envs

    return list_envs()


@pytest.mark.slow
def test_a2c_learns_cartpole() -> None:
    best, frames, seconds = learn_until("a2c", "CartPole-v1", {"total_frames": 200_000}, 475.0, every=20)
    assert best >= 475.0, f"A2C reached {best:.1f} in {frames} frames ({seconds:.0f}s)"


@pytest.mark.slow
def test_dqn_learns_cartpole() -> None:
    best, frames, seconds = learn_until("dqn", "CartPole-v1", {}, 450.0, every=10)
    assert best >= 450.0, f"DQN reached {best:.1f} in {frames} frames ({seconds:.0f}s)"


@pytest.mark.slow
@pytest.mark.parametrize("matmul_dtype", ["float32", "bfloat16"])
def test_sac_learns_pendulum(matmul_dtype: str) -> None:
    best, frames, seconds = learn_until("sac", "Pendulum-v1", {"total_frames": 25_000, "matmul_dtype": matmul_dtype},
                                        -200.0, every=16)
    assert best > -250.0, f"SAC ({matmul_dtype}) reached {best:.1f} in {frames} frames ({seconds:.0f}s)"


@pytest.mark.slow
def test_impala_learns_cartpole() -> None:
    # IMPALA is meant for async_actors; under local (until that policy exists) the rollouts are
    # on-policy and V-trace reduces to n-step returns.
    policy = "async_actors" if "async_actors" in POLICIES else "local"
    best, frames, seconds = learn_until("impala", "CartPole-v1", {"total_frames": 200_000}, 475.0,
                                        every=20, policy=policy)
    assert best >= 475.0, f"IMPALA ({policy}) reached {best:.1f} in {frames} frames ({seconds:.0f}s)"


def test_ppo_obs_norm_statistics_checkpoint_and_eval() -> None:
    """obs_norm: running statistics of the raw observations, saved in checkpoints, frozen for eval."""
    from torchrl.envs import TransformedEnv

    from torchfrag.algos.ppo import make_ppo

    cfg = {"num_envs": 4, "steps": 64, "minibatch_size": 64, "epochs": 1, "obs_norm": True}
    loop = make_ppo("Pendulum-v1", cfg, seed=0)
    raw = make_env("Pendulum-v1", 4, seed=0)  # the same envs, unnormalised
    batch = run(capture(loop), iterations=2).output
    assert math.isfinite(float(batch["loss_objective"]))
    vecnorm = loop.env.transform[0]
    loc = vecnorm.loc["observation"]
    # normalised observations have roughly zero mean and unit scale under the running statistics
    obs = loop.rollout()["observation"]
    assert obs.abs().max() <= 10.0
    assert obs.mean(dim=(0, 1)).abs().max() < 1.0
    # the statistics follow the raw observations (cos, sin, angular velocity of the pendulum)
    # (cos and sin against a random-action rollout's; the angular velocity's mean depends on the
    # trajectories' swings, -0.41 here against 1.10 for uniform actions, so only its bound)
    raw_obs = raw.rollout(128)["observation"].reshape(-1, 3)
    assert torch.allclose(loc[:2], raw_obs.mean(0)[:2], atol=0.5)
    assert float(loc[2].abs()) < 8.0  # Pendulum's angular velocity bound
    raw.close()
    # checkpoint round trip restores the statistics
    state = loop.training_state()
    other = make_ppo("Pendulum-v1", cfg, seed=1)
    assert not torch.allclose(other.env.transform[0].loc["observation"], loc)
    other.load_training_state(state)
    assert torch.equal(other.env.transform[0].loc["observation"], vecnorm.loc["observation"])
    other.close()
    # evaluation uses a frozen copy: stepping it leaves the statistics alone
    frozen = loop.eval_transform()
    before = frozen[0].loc["observation"].clone()
    env = TransformedEnv(make_env("Pendulum-v1", 2, seed=5), frozen)
    env.rollout(20)
    assert torch.equal(frozen[0].loc["observation"], before)
    env.close()
    loop.close()
    with pytest.raises(ValueError, match="obs_norm needs collector='rollout'"):
        make_ppo("Pendulum-v1", {**cfg, "collector": "pool"})


def test_train_cli_obs_norm_evaluates_with_training_statistics(tmp_path) -> None:
    from torchfrag.train import compose_config, train

    cfg = compose_config(["algo=ppo_mujoco", "env=Pendulum-v1", "algo.obs_norm=true", "total_frames=1024",
                          "eval_episodes=1", "progress=false", "plot=false", "logger=none",
                          "algo.num_envs=2", "algo.steps=256"])
    summary = train(cfg, run_dir=str(tmp_path))
    assert summary["frames"] >= 1024 and len(summary["eval_returns"]) == 1
    assert -2000 < summary["eval_returns"][0] <= 0  # a real Pendulum episode under the frozen statistics


# -- one shape: YAML only overrides the dataclass; one factory for every algorithm ----------------
def _algo_yaml_files() -> list[str]:
    import glob
    import os

    from torchfrag.train import config_dir

    root = config_dir()
    return sorted(glob.glob(os.path.join(root, "algo", "*.yaml")) + glob.glob(os.path.join(root, "algo_env", "*.yaml")))


@pytest.mark.parametrize("path", _algo_yaml_files(), ids=lambda p: p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1])
def test_algo_yaml_keys_are_dataclass_fields_and_only_override(path: str) -> None:
    import yaml

    with open(path) as f:
        text = f.read()
    node = yaml.safe_load(text)
    if "# @package _global_" in text:
        # A pair preset that also sets env options (CarRacing's frame skip): the algo part is
        # checked below; the env part may only set options.
        assert set(node) <= {"algo", "env"} and set(node.get("env", {})) <= {"options"}, path
        node = node["algo"]
    schemas = [d for d in node.get("defaults", []) if isinstance(d, str) and d.endswith("_schema")]
    name = node.get("name") or (schemas[0][: -len("_schema")] if schemas else path.rsplit("/", 1)[-1].split("_")[0])
    config_cls, _ = get_algo(name)
    defaults = config_cls().to_dict()
    keys = [k for k in node if k not in ("defaults", "name")]
    unknown = [k for k in keys if k not in defaults]
    assert not unknown, f"{path}: {unknown} are not fields of {config_cls.__name__}"
    repeated = [k for k in keys if node[k] == defaults[k]]
    assert not repeated, f"{path}: {repeated} repeat {config_cls.__name__}'s defaults (the dataclass is the single source)"
    # the YAML states what the preset reaches (a comment), except algo_env fragments of other presets
    assert text.lstrip().startswith("#"), f"{path} has no header comment"


def test_composed_algo_config_is_dataclass_defaults_plus_yaml() -> None:
    from omegaconf import OmegaConf

    from torchfrag.train import compose_config

    for name in sorted(ALGOS):
        composed = OmegaConf.to_container(compose_config([f"algo={name}", "env=CartPole-v1"]
                                                         if name != "sac" else [f"algo={name}", "env=Pendulum-v1"]).algo)
        config_cls, _ = get_algo(name)
        assert config_cls.from_dict(composed) == config_cls(), name


# env families: classic discrete, classic continuous, MuJoCo (float64 observations), Atari (uint8 frames)
FAMILIES = {
    "ppo": ["CartPole-v1", "Pendulum-v1", "HalfCheetah-v5", "Pong-v5"],
    "a2c": ["CartPole-v1", "Pendulum-v1", "HalfCheetah-v5", "Pong-v5"],
    "impala": ["CartPole-v1", "Pendulum-v1", "HalfCheetah-v5", "Pong-v5"],
    "dqn": ["CartPole-v1", "Pong-v5"],
    "sac": ["Pendulum-v1", "HalfCheetah-v5"],
}


@pytest.mark.parametrize("name, env_id", [(n, e) for n in sorted(FAMILIES) for e in FAMILIES[n]])
def test_factory_builds_every_algo_locally_and_on_a_worker_slice(name: str, env_id: str) -> None:
    import pickle

    from torchfrag.algos import AlgoFactory
    from torchfrag.policies.factory import EnvSlice

    if env_id not in _envs():
        pytest.skip(f"{env_id} is not built into this torchfrag")
    cfg = {**TINY[name][1], "num_envs": 4}
    factory = pickle.loads(pickle.dumps(make_factory(name, env_id, cfg, seed=5)))
    assert isinstance(factory, AlgoFactory) and factory.algo == name
    full = factory()
    part = factory(EnvSlice(offset=2, count=2, total=4))
    try:
        for loop, n in ((full, 4), (part, 2)):
            obs = loop.env.observation_spec["observation"]
            image = obs.ndim - 1 == 3
            assert obs.dtype == (torch.uint8 if image else torch.float32), (name, env_id, obs.dtype)
            batch = loop.rollout()
            assert batch.batch_size[0] == n
            assert batch["observation"].dtype == obs.dtype
            assert batch["next", "observation"].dtype == obs.dtype
        # the slice's envs are the full pool's envs 2 and 3 (same seeds), and the networks start equal
        first_full = full.rollout.stats  # noqa: F841 - (rollouts ran; compare fresh resets below)
        ref = factory()
        sl = factory(EnvSlice(offset=2, count=2, total=4))
        try:
            assert torch.equal(ref.env.reset()["observation"][2:], sl.env.reset()["observation"])
            for (k, a), (_, b) in zip(ref.state_dict().items(), sl.state_dict().items()):
                if isinstance(a, torch.Tensor) and a.is_floating_point() and "env" not in k:
                    assert torch.equal(a, b), k
        finally:
            ref.close()
            sl.close()
    finally:
        full.close()
        part.close()


def test_dqn_cli_checkpoint_resumes_target_optimizer_and_epsilon(tmp_path) -> None:
    """The shipped dqn through torchfrag.train: a checkpoint holds the lean learner's target network,
    optimizer and step count and the epsilon, and resuming with nothing left re-saves them exactly."""
    from torchfrag.runtime import load_checkpoint
    from torchfrag.train import compose_config, train

    base = ["algo=dqn", "env=CartPole-v1", "algo.num_envs=2", "algo.steps=8", "algo.updates=2",
            "algo.batch_size=8", "algo.learning_starts=32", "algo.exploration_fraction=5.0",
            "eval_episodes=0", "progress=false", "plot=false", "logger=none"]
    train(compose_config([*base, "algo.total_frames=96", "checkpoint_every=3"]), run_dir=str(tmp_path / "a"))
    mid = str(tmp_path / "a" / "checkpoints" / "iter_000003.pt")
    saved = load_checkpoint(mid)["state"]
    assert saved["learn"]["steps"] == 6 and 0.01 < saved["extra"]["eps"] < 1.0
    same = train(compose_config([*base, "algo.total_frames=48", f"resume={mid}"]), run_dir=str(tmp_path / "b"))
    again = load_checkpoint(same["checkpoint"])["state"]
    assert again["learn"]["steps"] == 6 and again["extra"]["eps"] == pytest.approx(saved["extra"]["eps"])
    for k, v in saved["learn"]["target"].items():
        assert torch.equal(v, again["learn"]["target"][k]), k
    for k, v in saved["model"]["qnet"].items():
        assert torch.equal(v, again["model"]["qnet"][k]), k


def test_init_scale_sets_the_policy_initial_noise() -> None:
    """``init_scale`` is the continuous policy's starting standard deviation (before the squash)."""
    from torchfrag.algos.envs import make_env
    from torchfrag.algos.networks import make_actor_critic

    env = make_env("Pendulum-v1", 3)
    td = env.reset()
    for scale in (1.0, 0.37):
        actor, _ = make_actor_critic(env, [8], init_scale=scale)
        assert torch.allclose(actor(td.clone())["scale"], torch.full((3, 1), scale))
    with pytest.raises(ValueError, match="init_scale"):
        make_actor_critic(env, [8], init_scale=0.0)
    loop = make_ppo("Pendulum-v1", PPOConfig(num_envs=2, steps=4, minibatch_size=8, init_scale=0.5,
                                             max_grad_norm=None))
    assert torch.allclose(loop.actor(loop.env.reset())["scale"], torch.full((2, 1), 0.5))
    assert loop.learn.max_grad_norm is None and math.isfinite(float(loop()["grad_norm"]))
    loop.close()
    env.close()
