"""A user's script for the cluster tests: PPO on CartPole under a policy, as ``torchrun`` runs it.

``python _cluster_job.py '<policy json>' <iterations> <out dir>``: node 0 (the driver) touches
``<out>/iter<i>`` after each iteration, saves the learner's parameters to ``<out>/params.pt`` and
the frames its rollout counted and the iterations it ran to ``<out>/counts.json``, and the workers that
failed and the frames that were lost with them (``policy.on_failure=continue``) to ``<out>/lost.json``;
every other rank serves as a worker. The policy is JSON, or the path of a user's YAML policy file
(``<config folder>/policy/<name>.yaml``). With ``CLUSTER_JOB_COUNT_BYTES=1``, node 0 also saves what
every host has sent so far after iteration ``i`` to ``<out>/sent<i>.json``. :func:`train` is the same
run in one process (loopback).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from torchfrag.algos.loop import env_fragment
from torchfrag.graph import capture
from torchfrag.policies import PPOFactory, load_policy_file
from torchfrag.runtime import run
from torchfrag.testing.cluster import sent_bytes

CFG = {"num_envs": 4, "steps": 16, "minibatch_size": 32, "epochs": 2}


def train(policy: Any, iterations: int, out: Path | None = None) -> torch.Tensor:
    """Runs the job; returns the driver's parameters after ``iterations`` (also saved under ``out``)."""
    if isinstance(policy, str) and policy.endswith(".yaml"):
        policy = load_policy_file(policy)
    factory = PPOFactory("CartPole-v1", CFG, exploration="mode")
    loop = factory()

    count_bytes = os.environ.get("CLUSTER_JOB_COUNT_BYTES") == "1"

    def mark(i: int, _out: Any, _graph: Any) -> None:
        if out is not None:
            if count_bytes:  # what every host has sent so far, after iteration i
                (out / f"sent{i}.json").write_text(json.dumps(sent_bytes()))
            (out / f"iter{i}").touch()

    result = run(capture(loop), policy, iterations=iterations, factory=factory, hooks=[mark])
    params = torch.cat([p.detach().reshape(-1) for p in loop.parameters()])
    if out is not None:
        torch.save(params, out / "params.pt")
        counts = {"frames": int(env_fragment(loop).frames), "iterations": int(result.iterations)}
        (out / "counts.json").write_text(json.dumps(counts))
        lost = {"failed": list(result.extra.get("failed", [])),
                "frames_missing": int(result.extra.get("frames_missing", 0))}
        (out / "lost.json").write_text(json.dumps(lost))
    return params


if __name__ == "__main__":
    spec = sys.argv[1]
    train(spec if spec.endswith(".yaml") else json.loads(spec), int(sys.argv[2]), Path(sys.argv[3]))
