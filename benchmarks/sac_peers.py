"""SAC peers for ``benchmarks/time_to_solve.py``: CleanRL's and TorchRL's structures, written here.

Neither CleanRL's ``sac_continuous_action.py`` nor TorchRL's
``sota-implementations/sac/sac.py`` is copied: both are re-written from their
public descriptions (hyper-parameters and loop structure), so the benchmark
runs without their checkouts and with the same shared hyper-parameters as
torchfrag's ``algo=sac_mujoco`` preset (batch 256, one gradient step per frame,
``learning_starts`` random frames, 256x256 networks, buffer 1e6, gamma 0.99):

* :func:`run_cleanrl_style` - one Gymnasium env stepped by hand, a NumPy ring
  buffer, plain ``nn.Module`` actor (tanh-squashed Gaussian with the log-std
  squashed into ``[-5, 2]``) and twin Q-networks, separate Adam optimizers
  (critics and temperature ``1e-3``, actor ``3e-4``), the actor and the
  temperature updated twice every second step (``policy_frequency=2``), a
  Polyak target update (``tau=0.005``) after every step: CleanRL's defaults.
* :func:`run_torchrl_style` - TorchRL's pieces as its script puts them
  together: ``GymEnv`` with ``DoubleToFloat``/``RewardSum`` transforms, a
  ``Collector`` (``SyncDataCollector`` before TorchRL 0.11) of 1000 frames per batch (random actions for the first
  ``learning_starts`` frames), a ``LazyMemmapStorage`` replay buffer, ``SACLoss``
  with two critics, three Adam optimizers (``lr=3e-4``, ``eps=1e-8``), a
  ``SoftUpdate`` (``eps=0.995``) after each of the batch's ``1000 * utd``
  gradient steps: TorchRL's defaults.

Each prints ``global_step=N, episodes=K, episodic_return=R`` lines (the
format :class:`benchmarks.time_to_solve.RunWatch` follows) and, at the end,
``learn_fps=F`` (frames per second after the random warm-up).

Example:
    >>> from benchmarks.sac_peers import SACPeerConfig
    >>> SACPeerConfig().batch_size
    256
"""
from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

__all__ = ["CleanRLStyleUpdate", "SACPeerConfig", "run_cleanrl_style", "run_torchrl_style"]


@dataclass
class SACPeerConfig:
    """Hyper-parameters shared by both peers (and torchfrag's ``algo=sac_mujoco``)."""

    env_id: str = "HalfCheetah-v5"
    total_frames: int = 1_000_000
    learning_starts: int = 5000
    batch_size: int = 256
    buffer_size: int = 1_000_000
    gamma: float = 0.99
    hidden: int = 256
    seed: int = 0
    #: Where the networks and the updates run; envs and replay buffers stay on the CPU.
    device: str = "cpu"


def _emit(step: int, returns: list[float], learn: tuple[float, int] | None = None) -> None:
    """The finished episodes' mean return; with ``learn`` (time and frame where learning started),
    the learning frames/s so far, so that a run stopped from outside still reports it."""
    if returns:
        sys.stdout.write(f"global_step={step}, episodes={len(returns)}, "
                         f"episodic_return={sum(returns) / len(returns)}\n")
        if learn is not None and step > learn[1]:
            sys.stdout.write(f"learn_fps={(step - learn[1]) / (time.perf_counter() - learn[0])}\n")
        sys.stdout.flush()


def _mlp(inp: int, out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, out))


class _ConcatMLP(nn.Module):
    """Q(s, a): the MLP on ``cat(observation, action)`` (TorchRL's ``MLP`` concatenates its inputs)."""

    def __init__(self, inp: int, hidden: int) -> None:
        super().__init__()
        self.net = _mlp(inp, 1, hidden)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, act], -1))


# -- CleanRL's structure ---------------------------------------------------------------------------
class _SquashedGaussian(nn.Module):
    """CleanRL-style actor: mean and tanh-bounded log-std heads, tanh squash into the action box."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.mean = nn.Linear(hidden, act_dim)
        self.log_std = nn.Linear(hidden, act_dim)
        self.register_buffer("scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(obs)
        log_std = -5.0 + 3.5 * (torch.tanh(self.log_std(h)) + 1.0)  # into [-5, 2]
        std = log_std.exp()
        mean = self.mean(h)
        u = mean + std * torch.randn_like(mean)
        y = torch.tanh(u)
        logp = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1, keepdim=True)
        logp = logp - torch.log(self.scale * (1 - y.pow(2)) + 1e-6).sum(-1, keepdim=True)
        return y * self.scale + self.bias, logp


class CleanRLStyleUpdate:
    """CleanRL's networks, optimizers and gradient step (what :func:`run_cleanrl_style` trains, and what
    ``benchmarks/sac_update.py`` times beside torchfrag's step).

    Args:
        obs_dim: Observation size.
        low: The action box's lower bounds (its size is the action size).
        high: Its upper bounds.
        cfg: Hyper-parameters (``hidden``, ``gamma``, ``device``).

    Example:
        >>> import numpy as np, torch
        >>> from benchmarks.sac_peers import CleanRLStyleUpdate, SACPeerConfig
        >>> upd = CleanRLStyleUpdate(3, -np.ones(1), np.ones(1), SACPeerConfig(hidden=8))
        >>> o, no, a, r, d = torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4, 1), torch.ones(4, 1), torch.zeros(4, 1)
        >>> upd.step(o, a, r, no, d, step=0)
    """

    tau = 0.005
    policy_frequency = 2

    def __init__(self, obs_dim: int, low: np.ndarray, high: np.ndarray, cfg: SACPeerConfig) -> None:
        dev = torch.device(cfg.device)
        act_dim = int(np.asarray(low).shape[0])
        self.gamma = cfg.gamma
        self.actor = _SquashedGaussian(obs_dim, act_dim, cfg.hidden, low, high).to(dev)
        self.qs = nn.ModuleList([_mlp(obs_dim + act_dim, 1, cfg.hidden) for _ in range(2)]).to(dev)
        self.q_targets = nn.ModuleList([_mlp(obs_dim + act_dim, 1, cfg.hidden) for _ in range(2)]).to(dev)
        self.q_targets.load_state_dict(self.qs.state_dict())
        self.q_opt = torch.optim.Adam(self.qs.parameters(), lr=1e-3)
        self.pi_opt = torch.optim.Adam(self.actor.parameters(), lr=3e-4)
        self.log_alpha = torch.zeros(1, requires_grad=True, device=dev)
        self.a_opt = torch.optim.Adam([self.log_alpha], lr=1e-3)
        self.target_entropy = -float(act_dim)

    def step(self, o: torch.Tensor, a: torch.Tensor, r: torch.Tensor, no: torch.Tensor, d: torch.Tensor,
             step: int) -> None:
        """One gradient step on a sampled batch (``d``: 1.0 where the episode terminated); the actor and the
        temperature are updated ``policy_frequency`` times every ``policy_frequency``-th step."""
        actor, qs, q_targets, log_alpha = self.actor, self.qs, self.q_targets, self.log_alpha
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            na, nlogp = actor(no)
            nin = torch.cat([no, na], -1)
            target = torch.min(q_targets[0](nin), q_targets[1](nin)) - alpha * nlogp
            y = r + (1.0 - d) * self.gamma * target
        inp = torch.cat([o, a], -1)
        q_loss = sum(nn.functional.mse_loss(q(inp), y) for q in qs)
        self.q_opt.zero_grad()
        q_loss.backward()
        self.q_opt.step()
        if step % self.policy_frequency == 0:
            for _ in range(self.policy_frequency):  # the delayed updates, made up
                pa, logp = actor(o)
                pin = torch.cat([o, pa], -1)
                pi_loss = (alpha * logp - torch.min(qs[0](pin), qs[1](pin))).mean()
                self.pi_opt.zero_grad()
                pi_loss.backward()
                self.pi_opt.step()
                a_loss = (-log_alpha.exp() * (logp.detach() + self.target_entropy)).mean()
                self.a_opt.zero_grad()
                a_loss.backward()
                self.a_opt.step()
                alpha = log_alpha.exp().detach()
        with torch.no_grad():
            for p, tp in zip(qs.parameters(), q_targets.parameters()):
                tp.lerp_(p, self.tau)


def run_cleanrl_style(cfg: SACPeerConfig) -> None:
    """Trains SAC the way CleanRL's ``sac_continuous_action.py`` does (see the module docstring)."""
    import gymnasium as gym

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    env = gym.make(cfg.env_id)
    obs_dim = env.observation_space.shape[0]
    act_dim = env.action_space.shape[0]
    dev = torch.device(cfg.device)
    learner = CleanRLStyleUpdate(obs_dim, env.action_space.low, env.action_space.high, cfg)
    actor = learner.actor
    cap = min(cfg.buffer_size, cfg.total_frames)
    b_obs = np.zeros((cap, obs_dim), np.float32)
    b_next = np.zeros((cap, obs_dim), np.float32)
    b_act = np.zeros((cap, act_dim), np.float32)
    b_rew = np.zeros((cap, 1), np.float32)
    b_term = np.zeros((cap, 1), np.float32)
    obs, _ = env.reset(seed=cfg.seed)
    env.action_space.seed(cfg.seed)
    ep_ret, finished = 0.0, []
    t_learn = None
    for step in range(cfg.total_frames):
        if step < cfg.learning_starts:
            action = env.action_space.sample()
        else:
            with torch.no_grad():
                action = actor(torch.as_tensor(obs, dtype=torch.float32, device=dev)[None])[0][0].cpu().numpy()
        nobs, reward, term, trunc, _ = env.step(action)
        i = step % cap
        b_obs[i], b_next[i], b_act[i], b_rew[i], b_term[i] = obs, nobs, action, reward, float(term)
        ep_ret += float(reward)
        obs = nobs
        if term or trunc:
            finished.append(ep_ret)
            ep_ret = 0.0
            obs, _ = env.reset()
        _emit(step + 1, finished, t_learn)
        finished = []
        if step < cfg.learning_starts:
            continue
        if t_learn is None:
            t_learn = (time.perf_counter(), step)
        idx = rng.integers(0, min(step + 1, cap), cfg.batch_size)
        o, no, a, r, d = (torch.from_numpy(x[idx]).to(dev) for x in (b_obs, b_next, b_act, b_rew, b_term))
        learner.step(o, a, r, no, d, step)
    if t_learn is not None:
        sys.stdout.write(f"learn_fps={(cfg.total_frames - t_learn[1]) / (time.perf_counter() - t_learn[0])}\n")
    env.close()


# -- TorchRL's structure ---------------------------------------------------------------------------
def run_torchrl_style(cfg: SACPeerConfig, frames_per_batch: int = 1000, utd_ratio: float = 1.0) -> None:
    """Trains SAC the way TorchRL's ``sota-implementations/sac/sac.py`` does (see the module docstring)."""
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.collectors import Collector
    from torchrl.data import LazyMemmapStorage, ReplayBuffer
    from torchrl.envs import DoubleToFloat, GymEnv, RewardSum, TransformedEnv
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate

    torch.manual_seed(cfg.seed)
    env = TransformedEnv(GymEnv(cfg.env_id, device="cpu"), DoubleToFloat())
    env.append_transform(RewardSum())
    env.set_seed(cfg.seed)
    spec = env.action_spec_unbatched
    obs_dim = env.observation_spec["observation"].shape[-1]
    act_dim = spec.shape[-1]
    body = TensorDictModule(nn.Sequential(_mlp(obs_dim, 2 * act_dim, cfg.hidden),
                                          NormalParamExtractor(scale_mapping="biased_softplus_1.0",
                                                               scale_lb=0.1)),
                            ["observation"], ["loc", "scale"])
    actor = ProbabilisticActor(body, in_keys=["loc", "scale"], spec=spec, distribution_class=TanhNormal,
                               distribution_kwargs={"low": spec.space.low, "high": spec.space.high,
                                                    "tanh_loc": False},
                               default_interaction_type="random", return_log_prob=False)
    qnet = ValueOperator(_ConcatMLP(obs_dim + act_dim, cfg.hidden), in_keys=["observation", "action"])
    dev = torch.device(cfg.device)
    actor, qnet = actor.to(dev), qnet.to(dev)
    loss = SACLoss(actor, qnet, num_qvalue_nets=2, loss_function="l2", delay_actor=False,
                   delay_qvalue=True, alpha_init=1.0)
    loss.make_value_estimator(gamma=cfg.gamma)
    updater = SoftUpdate(loss, eps=0.995)
    opt_actor = torch.optim.Adam(loss.actor_network_params.flatten_keys().values(), lr=3e-4, eps=1e-8)
    opt_critic = torch.optim.Adam(loss.qvalue_network_params.flatten_keys().values(), lr=3e-4, eps=1e-8)
    opt_alpha = torch.optim.Adam([loss.log_alpha], lr=3e-4)
    # TorchRL's script: the policy on the device, the env and the stored batches on the CPU.
    collector = Collector(env, actor, frames_per_batch=frames_per_batch, total_frames=cfg.total_frames,
                          init_random_frames=cfg.learning_starts, policy_device=dev, env_device="cpu",
                          storing_device="cpu")
    scratch = tempfile.TemporaryDirectory(prefix="torchrl_sac_")
    buffer = ReplayBuffer(storage=LazyMemmapStorage(cfg.buffer_size, scratch_dir=scratch.name),
                          batch_size=cfg.batch_size)
    updates = int(frames_per_batch * utd_ratio)
    frames, t_learn = 0, None
    for batch in collector:
        frames += batch.numel()
        done = batch["next", "done"].squeeze(-1)
        _emit(frames, batch["next", "episode_reward"][done].flatten().tolist(), t_learn)
        buffer.extend(batch.reshape(-1))
        if frames < cfg.learning_starts:
            continue
        if t_learn is None:
            t_learn = (time.perf_counter(), frames - batch.numel())
        for _ in range(updates):
            sample = buffer.sample().to(dev, non_blocking=True)
            out = loss(sample)
            opt_actor.zero_grad()
            opt_critic.zero_grad()
            opt_alpha.zero_grad()
            (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
            opt_actor.step()
            opt_critic.step()
            opt_alpha.step()
            updater.step()
        collector.update_policy_weights_()
    if t_learn is not None:
        sys.stdout.write(f"learn_fps={(frames - t_learn[1]) / (time.perf_counter() - t_learn[0])}\n")
    collector.shutdown()
    scratch.cleanup()


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.sac_peers --style cleanrl --env Pendulum-v1 --frames 20000 --seed 0``."""
    import argparse

    p = argparse.ArgumentParser(description="SAC written the CleanRL way or the TorchRL way")
    p.add_argument("--style", choices=("cleanrl", "torchrl"), required=True)
    p.add_argument("--env", default=SACPeerConfig.env_id)
    p.add_argument("--frames", type=int, default=SACPeerConfig.total_frames)
    p.add_argument("--learning-starts", type=int, default=SACPeerConfig.learning_starts)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    cfg = SACPeerConfig(env_id=args.env, total_frames=args.frames, learning_starts=args.learning_starts,
                        seed=args.seed, device=args.device)
    (run_cleanrl_style if args.style == "cleanrl" else run_torchrl_style)(cfg)


if __name__ == "__main__":
    main()
