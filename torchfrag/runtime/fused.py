"""The fused rollout of ``single_device``: a Rollout's per-step body run (and compiled) on one device.

:func:`fuse_rollout` replaces, for the duration of a run, the step function a
:class:`~torchfrag.fragments.Rollout` calls (its captured body: act, then env
step with auto-reset) by one that counts its calls and, where it applies, is
compiled whole with ``torch.compile``. Whole-body compilation applies when
every env the body steps is a torch-native
:class:`~torchfrag.envs.batched.BatchedEnv`: then act and env step form one
graph of tensor operations on the device, with no host round trip per step.
A body stepping the C++ pool (host code) keeps running eagerly; its networks
are still compiled by :func:`~torchfrag.runtime.placed.on_device`.

The same code runs on every device: on the CPU it is what the tests exercise.

Example:
    >>> import torch
    >>> from tensordict.nn import TensorDictModule
    >>> from torchfrag.envs.batched import make
    >>> from torchfrag.fragments import Rollout
    >>> from torchfrag.runtime.fused import fuse_rollout
    >>> env = make("Pendulum-v1", 4, seed=0)
    >>> rollout = Rollout(TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"]), env, 5)
    >>> undo = fuse_rollout(rollout, compile=False)
    >>> rollout().batch_size, rollout.fused_steps
    (torch.Size([4, 5]), 5)
    >>> undo()
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import torch
from torch import nn

logger = logging.getLogger(__name__)

__all__ = ["fuse_rollout", "compiles_whole_body"]


def compiles_whole_body(rollout: nn.Module) -> bool:
    """Whether the rollout's body can be compiled whole: all its envs are torch-native tensor code."""
    from torchrl.envs import EnvBase

    from torchfrag.envs.batched import BatchedEnv

    envs = [m for m in rollout.body.modules() if isinstance(m, EnvBase)]
    return bool(envs) and all(isinstance(e, BatchedEnv) and e.compilable for e in envs)


def fuse_rollout(rollout: Any, compile: bool = True, backend: str = "inductor",
                 **compile_kwargs: Any) -> Callable[[], None]:
    """Runs ``rollout``'s per-step body through a counting (and, where it applies, compiled) step.

    The count goes to ``rollout.fused_steps`` (cumulative over runs) and
    ``rollout.fused_compiled`` tells whether the whole body was compiled.
    Torch-native envs skip their action range check (a host synchronisation)
    until the returned function restores it.

    Args:
        rollout: A :class:`~torchfrag.fragments.Rollout`.
        compile: Compile the whole body when :func:`compiles_whole_body` allows it.
        backend: ``torch.compile`` backend.
        **compile_kwargs: More ``torch.compile`` arguments.

    Returns:
        A function that restores the rollout's original step.
    """
    from torchfrag.envs.batched import BatchedEnv

    gm = rollout.body_graph.module
    original = gm.forward
    # The policy's actions come from the env's action spec: skip the range check
    # (a host synchronisation per step) while fused.
    checked = [e for e in rollout.body.modules() if isinstance(e, BatchedEnv) and e.check_actions]
    for env in checked:
        env.check_actions = False
    whole = compile and compiles_whole_body(rollout)
    body = torch.compile(original, backend=backend, **compile_kwargs) if whole else original
    if not hasattr(rollout, "fused_steps"):
        rollout.fused_steps = 0
    rollout.fused_compiled = whole

    def step(carry: Any) -> Any:
        rollout.fused_steps += 1
        return body(carry)

    # Rollout.forward looks its step up on the body's graph module at every call:
    # an instance attribute shadows the generated method until it is removed.
    gm.forward = step
    logger.debug("fused rollout %s (whole body compiled: %s)", rollout.describe(), whole)

    def undo() -> None:
        gm.__dict__.pop("forward", None)
        for env in checked:
            env.check_actions = True

    return undo
