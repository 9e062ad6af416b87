"""Runs ``python -m torchfrag.train`` in a subprocess on the tested checkout, as a user would.

Example:
    >>> from _cli import run_cli  # doctest: +SKIP
    >>> run_cli(["env=CartPole-v1", "algo.total_frames=256"], cwd="/tmp").returncode  # doctest: +SKIP
    0
"""
from __future__ import annotations

import os
import subprocess
import sys

import torchfrag


def run_cli(args: list[str], cwd: os.PathLike | str, timeout: float = 900) -> subprocess.CompletedProcess:
    """``python -m torchfrag.train *args`` with one OpenMP thread and the tested package first on
    ``PYTHONPATH``; output captured as text."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(torchfrag.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "torchfrag.train", *args], cwd=cwd, env=env, check=False,
                          capture_output=True, text=True, timeout=timeout)
