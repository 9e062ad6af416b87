"""A user's script for the cluster tests: PPO on CartPole under a policy, as ``torchrun`` runs it.

``python _cluster_job.py '<policy json>' <iterations> <out dir>``: node 0 (the driver) touches
``<out>/iter<i>`` after each iteration, saves the learner's parameters to ``<out>/params.pt`` and
the frames its rollout counted and the iterations it ran to ``<out>/counts.json``; every other rank
serves as a worker. :func:`train` is the same run in one process (loopback).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from torchfrag.algos.loop import env_fragment
from torchfrag.graph import capture
from torchfrag.policies import PPOFactory
from torchfrag.runtime import run

CFG = {"num_envs": 4, "steps": 16, "minibatch_size": 32, "epochs": 2}


def train(policy: dict[str, Any], iterations: int, out: Path | None = None) -> torch.Tensor:
    """Runs the job; returns the driver's parameters after ``iterations`` (also saved under ``out``)."""
    factory = PPOFactory("CartPole-v1", CFG, exploration="mode")
    loop = factory()

    def mark(i: int, _out: Any, _graph: Any) -> None:
        if out is not None:
            (out / f"iter{i}").touch()

    result = run(capture(loop), policy, iterations=iterations, factory=factory, hooks=[mark])
    params = torch.cat([p.detach().reshape(-1) for p in loop.parameters()])
    if out is not None:
        torch.save(params, out / "params.pt")
        counts = {"frames": int(env_fragment(loop).frames), "iterations": int(result.iterations)}
        (out / "counts.json").write_text(json.dumps(counts))
    return params


if __name__ == "__main__":
    train(json.loads(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
