"""What a training loop module is, and what ``torchfrag.train`` reads from one.

A loop is an ``nn.Module`` whose ``forward()`` runs one iteration out of
fragments. The trainer needs nothing else from it; it finds, through the
fragment API:

* the **env fragment**: the loop's :class:`~torchfrag.fragments.Rollout` (or
  :class:`~torchfrag.fragments.Collect`), whose ``frames`` and ``stats`` give
  progress and training returns (:func:`env_fragment`);
* the **act fragment** to evaluate: the first :class:`~torchfrag.fragments.Act`
  in the loop (the one inside its ``Rollout``), run deterministically; a loop
  without one (a ``Collect`` over a collector) names its policy ``actor``
  (:func:`eval_policy`);
* the **checkpoint state** through the standard hooks: ``state_dict()`` of
  the loop's modules, ``state_dict_extra()`` of every fragment that owns an
  optimizer (:class:`~torchfrag.fragments.Learn`) and the env fragment's frame
  count (:func:`training_state`). A loop may override this with its own
  ``training_state()``/``load_training_state()`` methods, as :class:`LoopBase` does.

Example:
    >>> from torchfrag.algos import AlgoFactory
    >>> from torchfrag.algos.loop import env_fragment, eval_policy, training_state
    >>> loop = AlgoFactory("CartPole-v1", {"num_envs": 2, "steps": 4}, algo="a2c")()
    >>> env_fragment(loop).frames, type(eval_policy(loop)).__name__
    (0, 'ProbabilisticActor')
    >>> sorted(training_state(loop))
    ['extra', 'frames', 'learn', 'model']
    >>> loop.close()
"""
from __future__ import annotations

import logging
from typing import Any, ClassVar

from torch import nn

logger = logging.getLogger(__name__)

__all__ = ["LoopBase", "close_loop", "env_fragment", "eval_policy", "load_training_state",
           "training_state"]


def env_fragment(loop: nn.Module) -> Any:
    """The loop's env fragment (its first ``Rollout`` or ``Collect``).

    Raises:
        TypeError: The loop has none (the trainer could not count frames).
    """
    from torchfrag.fragments import Collect, Rollout

    for m in loop.modules():
        if isinstance(m, (Rollout, Collect)):
            return m
    raise TypeError(f"the loop {type(loop).__name__} has no Rollout or Collect fragment; "
                    "torchfrag.train counts frames and training returns on it")


def eval_policy(loop: nn.Module) -> nn.Module:
    """The policy to evaluate: the actor of the loop's first ``Act`` fragment, else ``loop.actor``.

    Raises:
        TypeError: Neither exists.
    """
    from torchfrag.fragments import Act

    for m in loop.modules():
        if isinstance(m, Act):
            return m.actor
    actor = getattr(loop, "actor", None)
    if isinstance(actor, nn.Module):
        return actor
    raise TypeError(f"the loop {type(loop).__name__} has no Act fragment and no `actor` module "
                    "to evaluate")


def _learners(loop: nn.Module) -> dict[str, Any]:
    return {name: m for name, m in loop.named_modules()
            if callable(getattr(m, "state_dict_extra", None))
            and callable(getattr(m, "load_state_dict_extra", None))}


def training_state(loop: nn.Module) -> dict[str, Any]:
    """Everything needed to resume ``loop``: its own ``training_state()``, or the standard hooks.

    The standard hooks: the loop's ``state_dict()`` (every parameter and
    buffer), ``state_dict_extra()`` of each fragment that has it (optimizer
    state), and the env fragment's frame count.
    """
    own = getattr(loop, "training_state", None)
    if callable(own):
        return own()
    return {"model": {"loop": loop.state_dict()},
            "learn": {name: m.state_dict_extra() for name, m in _learners(loop).items()},
            "frames": env_fragment(loop).frames}


def load_training_state(loop: nn.Module, state: dict[str, Any]) -> None:
    """Restores :func:`training_state` (the env restarts from a reset)."""
    own = getattr(loop, "load_training_state", None)
    if callable(own):
        own(state)
        return
    loop.load_state_dict(state["model"]["loop"])
    learners = _learners(loop)
    for name, extra in state["learn"].items():
        learners[name].load_state_dict_extra(extra)
    rollout = env_fragment(loop)
    rollout.frames = int(state["frames"])
    if callable(getattr(rollout, "reset", None)):
        rollout.reset()


def close_loop(loop: nn.Module) -> None:
    """Calls ``loop.close()`` if it has one, else closes every env the loop holds."""
    if callable(getattr(loop, "close", None)):
        loop.close()
        return
    from torchrl.envs import EnvBase

    for m in loop.modules():
        if isinstance(m, EnvBase) and not getattr(m, "is_closed", True):
            m.close()


class LoopBase(nn.Module):
    """Checkpoint and close plumbing shared by the shipped loops.

    Subclasses set ``env``, ``rollout``, ``learn`` and list their networks in
    ``MODELS`` (attribute names); algorithm-specific state (exploration,
    target networks, observation statistics) goes through :meth:`extra_state`.
    """

    MODELS: ClassVar[tuple[str, ...]] = ()

    def extra_state(self) -> dict[str, Any]:
        """Algorithm-specific state to checkpoint (exploration, target updaters)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`extra_state`."""

    def training_state(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimizer, counters."""
        return {"model": {m: getattr(self, m).state_dict() for m in self.MODELS},
                "learn": self.learn.state_dict_extra(), "frames": self.rollout.frames,
                "extra": self.extra_state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`training_state` (the env restarts from a reset)."""
        for m in self.MODELS:
            getattr(self, m).load_state_dict(state["model"][m])
        self.learn.load_state_dict_extra(state["learn"])
        self.load_extra_state(state.get("extra", {}))
        self.rollout.frames = int(state["frames"])
        self.rollout.reset()

    def close(self) -> None:
        """Closes the env."""
        env = getattr(self, "env", None)
        if env is not None and not getattr(env, "is_closed", True):
            env.close()
