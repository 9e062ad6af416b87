"""Shared helpers of the policy/RPC/fault tests (module-level: workers unpickle them)."""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import psutil
import torch

from torchfrag.policies.factory import EnvSlice, PPOFactory

CFG = {"num_envs": 4, "steps": 16, "minibatch_size": 32, "epochs": 2}


def params(loop: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in loop.parameters()])


def children() -> list[psutil.Process]:
    """Live (non-zombie) child processes of this test process, except multiprocessing helpers."""
    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() == psutil.STATUS_ZOMBIE:
                continue
            if "resource_tracker" in " ".join(c.cmdline()):
                continue
            out.append(c)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_no_children(timeout: float = 15.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = children()
        if not left:
            return []
        time.sleep(0.2)
    return children()


@dataclass
class FaultyFactory(PPOFactory):
    """A PPO factory whose worker number ``worker`` misbehaves on its ``at``-th rollout/step."""

    fault: str = "raise"   # raise | kill | hang
    worker: int = 1
    at: int = 2

    def __call__(self, env_slice: EnvSlice | None = None) -> torch.nn.Module:
        loop = super().__call__(env_slice)
        if env_slice is None or env_slice.rank != self.worker:
            return loop
        fault, at = self.fault, self.at
        state = {"n": 0}

        def misbehave() -> None:
            state["n"] += 1
            if state["n"] < at:
                return
            if fault == "raise":
                raise RuntimeError("injected fault in the rollout")
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if fault == "hang":
                time.sleep(3600)

        rollout = loop.rollout
        inner_forward = rollout.forward

        def forward(td=None):
            misbehave()
            return inner_forward(td)

        rollout.forward = forward
        env = loop.env
        inner_step = env.step_and_maybe_reset

        def step(td):
            misbehave()
            return inner_step(td)

        env.step_and_maybe_reset = step
        return loop
