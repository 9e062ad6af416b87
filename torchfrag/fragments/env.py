"""Environment fragments: :class:`EnvReset` and :class:`EnvStep`."""
from __future__ import annotations

import logging
from typing import Any

from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torchrl.envs import EnvBase

from torchfrag.fragments.base import Fragment

logger = logging.getLogger(__name__)

__all__ = ["EnvReset", "EnvStep", "env_carry_keys", "env_next_keys"]


def env_next_keys(env: EnvBase) -> list[NestedKey]:
    """Keys a step writes under ``"next"``: observations, rewards and done flags."""
    keys = list(env.observation_spec.keys(True, True))
    keys += list(env.reward_keys) + list(env.done_keys)
    return [("next", *((k,) if isinstance(k, str) else k)) for k in keys]


def env_carry_keys(env: EnvBase) -> list[NestedKey]:
    """Keys of the root TensorDict an env step starts from: observations and done flags."""
    return list(env.observation_spec.keys(True, True)) + list(env.done_keys)


class EnvReset(Fragment):
    """Resets an environment; takes nothing (or a TensorDict with ``"_reset"``).

    Example:
        >>> from torchfrag.envs import PoolEnv
        >>> from torchfrag.fragments import EnvReset
        >>> reset = EnvReset(PoolEnv("CartPole-v1", num_envs=2, seed=0))
        >>> reset()["observation"].shape
        torch.Size([2, 4])
    """

    impure = True
    role = "env"
    passthrough = False

    def __init__(self, env: EnvBase) -> None:
        super().__init__((), env_carry_keys(env), state=[env])
        self.env = env

    def describe(self) -> str:
        return f"EnvReset({type(self.env).__name__})"

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        return self.env.reset(tensordict)


class EnvStep(Fragment):
    """Steps a TorchRL environment (a :class:`~torchfrag.envs.PoolEnv` or any ``EnvBase``).

    With ``auto_reset=True`` (default) it calls ``env.step_and_maybe_reset``
    and returns ``(transition, carry)``: the transition holds the step's
    results under ``"next"``; ``carry`` is the next step's input, with
    finished envs already reset. With ``auto_reset=False`` it calls
    ``env.step`` and returns only the transition.

    Args:
        env: The environment.
        auto_reset: See above.

    Example:
        >>> from torchfrag.envs import PoolEnv
        >>> from torchfrag.fragments import EnvStep
        >>> env = PoolEnv("CartPole-v1", num_envs=2, seed=0)
        >>> step = EnvStep(env)
        >>> td = env.reset()
        >>> td["action"] = env.action_spec.rand()
        >>> transition, carry = step(td)
        >>> transition["next", "reward"].shape
        torch.Size([2, 1])
    """

    impure = True
    role = "env"

    def __init__(self, env: EnvBase, auto_reset: bool = True) -> None:
        super().__init__(list(env.action_keys), env_next_keys(env), state=[env])
        self.env = env
        self.auto_reset = auto_reset
        self.carry_keys = frozenset(env_carry_keys(env))

    def describe(self) -> str:
        return f"EnvStep({type(self.env).__name__})"

    def num_outputs(self) -> int:
        return 2 if self.auto_reset else 1

    def output_keys(self, available: frozenset | None) -> list[frozenset | None]:
        transition = super().output_keys(available)[0]
        if not self.auto_reset:
            return [transition]
        carry = None if available is None else (available | self.carry_keys)
        return [transition, carry]

    def forward(self, tensordict: TensorDictBase) -> Any:
        if self.auto_reset:
            return self.env.step_and_maybe_reset(tensordict)
        return self.env.step(tensordict)
