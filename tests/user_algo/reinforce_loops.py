"""A user's own algorithm, written as a user would outside torchfrag: REINFORCE on CartPole.

Nothing here is shipped; ``tests/test_user_algo.py`` trains it with
``python -m torchfrag.train algo=reinforce hydra.searchpath=[file://<this folder>/conf]``.
The loop deliberately uses its own attribute names (``collect``, ``returns``,
``update``, ``policy_net``) and no torchfrag base class, so the trainer can only
rely on the fragment API: the ``Rollout`` fragment, the ``Act`` inside it and
the standard state hooks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import ProbabilisticActor
from torchrl.objectives import LossModule

from torchfrag.algos import AlgoConfig, AlgoFactory
from torchfrag.fragments import Fragment, Learn, Rollout


@dataclass
class ReinforceConfig(AlgoConfig):
    num_envs: int = 8
    steps: int = 64
    total_frames: int = 20_000
    gamma: float = 0.99
    lr: float = 1e-2
    hidden: list[int] = field(default_factory=lambda: [32])


class ReturnsToGo(Fragment):
    """Discounted return from each step to the end of its episode (or of the batch), normalised."""

    def __init__(self, gamma: float) -> None:
        super().__init__([("next", "reward"), ("next", "done")], ["return_to_go"])
        self.gamma = float(gamma)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        reward = tensordict.get(("next", "reward")).squeeze(-1)
        done = tensordict.get(("next", "done")).squeeze(-1).float()
        out = torch.zeros_like(reward)
        running = torch.zeros_like(reward[:, 0])
        for t in range(reward.shape[1] - 1, -1, -1):  # time is dim 1 of [num_envs, steps]
            running = reward[:, t] + self.gamma * running * (1.0 - done[:, t])
            out[:, t] = running
        out = (out - out.mean()) / (out.std() + 1e-8)
        return tensordict.set("return_to_go", out)


class ReinforceLoss(LossModule):
    def __init__(self, actor: ProbabilisticActor) -> None:
        super().__init__()
        self.policy_net = actor

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        dist = self.policy_net.get_dist(tensordict)
        logp = dist.log_prob(tensordict.get("action"))
        return TensorDict(loss_pg=-(logp * tensordict.get("return_to_go")).mean())


class ReinforceLoop(nn.Module):
    def __init__(self, env: Any, cfg: ReinforceConfig) -> None:
        super().__init__()
        obs = env.observation_spec["observation"].shape[-1]
        spec = env.action_spec_unbatched
        layers: list[nn.Module] = []
        for width in cfg.hidden:
            layers += [nn.Linear(obs, width), nn.Tanh()]
            obs = width
        layers.append(nn.Linear(obs, spec.space.n))
        self.policy_net = ProbabilisticActor(
            TensorDictModule(nn.Sequential(*layers), ["observation"], ["logits"]), in_keys=["logits"],
            spec=spec, distribution_class=torch.distributions.Categorical)
        self.env_ = env
        self.collect = Rollout(self.policy_net, env, steps=cfg.steps)
        self.returns = ReturnsToGo(cfg.gamma)
        self.update = Learn(ReinforceLoss(self.policy_net), lr=cfg.lr,
                            select_keys=["observation", "action", "return_to_go"])

    def forward(self) -> TensorDictBase:
        batch = self.collect()
        batch = self.returns(batch)
        return self.update(batch)


@dataclass
class ReinforceFactory(AlgoFactory):
    def config_class(self) -> type[AlgoConfig]:
        return ReinforceConfig

    def build(self, env: Any, cfg: ReinforceConfig) -> nn.Module:
        return ReinforceLoop(env, cfg)
