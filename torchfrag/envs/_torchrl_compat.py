"""The private TorchRL/tensordict APIs torchfrag's envs and collectors still use, in one place.

Each is used because the public equivalent costs measurably more per step in
the hot loops of :class:`~torchfrag.envs.PoolEnv`,
:class:`~torchfrag.envs.batched.BatchedEnv` and
:class:`~torchfrag.collectors.PoolCollector` (see the comment on each). A
TorchRL or tensordict upgrade that renames or changes one of them makes
``tests/test_torchrl_compat.py`` fail with the name of the API, instead of a
confusing error deep inside a rollout. No other module of the package calls a
private TorchRL or tensordict name (that test greps the package for them).

One private name is not called but overridden: ``EnvBase._step_and_maybe_reset``,
which ``EnvBase.step_and_maybe_reset`` (and so ``rollout`` and the collectors)
dispatches to; ``PoolEnv`` and ``BatchedEnv`` override it with their fused
step-and-auto-reset. If TorchRL stopped dispatching to it, those envs would
silently fall back to the generic path (same results, several times slower):
the test checks the dispatch. ``_step``, ``_reset`` and ``_set_seed`` are
TorchRL's documented hooks for custom envs, not private APIs.

Example:
    >>> import torch
    >>> from torchfrag.envs._torchrl_compat import new_tensordict
    >>> new_tensordict({"x": torch.zeros(2, 3)}, torch.Size([2]))["x"].shape
    torch.Size([2, 3])
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["OVERRIDDEN_PRIVATE_HOOKS", "PRIVATE_APIS", "make_compatible_policy", "new_tensordict",
           "step_mdp"]

#: The private names this module relies on, as ``(module or class, attribute)``.
PRIVATE_APIS: tuple[tuple[str, str], ...] = (
    ("tensordict.TensorDict", "_new_unsafe"),
    ("torchrl.envs.utils", "_make_compatible_policy"),
    ("torchrl.envs.EnvBase", "_step_mdp"),
    ("torchrl.envs.EnvBase", "_step_and_maybe_reset"),
)

#: Private names torchfrag's env classes override (TorchRL calls them), as ``(class, method)``.
OVERRIDDEN_PRIVATE_HOOKS: tuple[tuple[str, str], ...] = (
    ("torchrl.envs.EnvBase", "_step_and_maybe_reset"),
)


def new_tensordict(data: Mapping[Any, torch.Tensor], batch_size: torch.Size,
                   device: torch.device | None = None) -> TensorDictBase:
    """A ``TensorDict`` built without checking shapes and devices.

    ``TensorDict._new_unsafe``: the entries are built by the caller with the
    right batch dimensions, and the public constructor's checks cost ~20us per
    call (once per step and batch in the hot loops).
    """
    return TensorDict._new_unsafe(dict(data), batch_size=batch_size, device=device)


def make_compatible_policy(policy: Any, observation_spec: Any, env: Any,
                           trust_policy: bool = False) -> Any:
    """Wraps ``policy`` as ``EnvBase.rollout`` does (``_make_compatible_policy``).

    Kept so that the fast rollout accepts exactly the policies TorchRL's own
    ``rollout`` accepts (plain modules, callables, ``TensorDictModule``).
    """
    from torchrl.envs.utils import _make_compatible_policy

    return _make_compatible_policy(policy, observation_spec, env=env, fast_wrap=True,
                                   trust_policy=trust_policy)


def step_mdp(env: Any, tensordict: TensorDictBase) -> TensorDictBase:
    """``env._step_mdp(tensordict)``: the env's cached ``step_mdp``.

    The cached version knows the env's keys; the public ``torchrl.envs.step_mdp``
    re-derives them on every call (several times slower per step).
    """
    return env._step_mdp(tensordict)
