"""CLI arguments that used to run with garbage, and resume from damaged or foreign checkpoints."""
from __future__ import annotations

import fractions
import hashlib
import io
import os
import time

import pytest
import torch
from omegaconf import OmegaConf

from torchfrag.runtime import CheckpointError, load_checkpoint, save_checkpoint
from torchfrag.runtime.checkpoint import MAGIC, VERSION, load_for_resume
from torchfrag.train import compose_config, train

BASE = ["eval_episodes=0", "progress=false", "logger=none"]
FAST = ["algo.num_envs=4", "algo.steps=64", "algo.epochs=1", "algo.minibatch_size=128", *BASE]


@pytest.mark.parametrize("override, match", [
    ("total_frames=-5", "total_frames must be a positive number of frames, got -5"),
    ("total_frames=0", "total_frames must be a positive number of frames, got 0"),
    ("algo.total_frames=0", "algo.total_frames must be a positive number of frames, got 0"),
    ("checkpoint_every=-1", r"checkpoint_every must be >= 0 .*got -1"),
    (f"seed={2**64}", r"seed must be in \[0, 2\*\*63\), got 18446744073709551616"),
    ("seed=-1", r"seed must be in \[0, 2\*\*63\), got -1"),
])
def test_bad_cli_values_are_refused_before_training(tmp_path, override, match) -> None:
    with pytest.raises(ValueError, match=match):
        train(compose_config([*FAST, override]), run_dir=str(tmp_path))
    assert not os.path.exists(tmp_path / "checkpoints")


def test_minibatch_size_zero_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="minibatch_size must be a positive integer .*got 0"):
        train(compose_config([*FAST, "algo.minibatch_size=0"]), run_dir=str(tmp_path))


def _foreign_checkpoint(path: str, overrides: list[str]) -> None:
    cfg = compose_config([*BASE, *overrides])
    save_checkpoint({"state": {}, "rng": torch.get_rng_state(), "iteration": 1, "curve": [],
                     "config": OmegaConf.to_yaml(cfg, resolve=True)}, path)


@pytest.mark.parametrize("now, match", [
    (["env=CartPole-v1", "env.id=Debug-v0"], "was trained with env.id='CartPole-v1', but this run "
                                             "has env.id='Debug-v0'"),
    (["env=CartPole-v1", "algo=a2c"], "was trained with algo.name='ppo', but this run has "
                                      "algo.name='a2c'"),
    (["env=CartPole-v1", "algo=dqn"], "algo.name='dqn'"),
])
def test_resume_under_another_env_or_algo_is_refused(tmp_path, now, match) -> None:
    ckpt = str(tmp_path / "ppo_cartpole.pt")
    _foreign_checkpoint(ckpt, ["env=CartPole-v1", "algo=ppo"])
    with pytest.raises(ValueError, match=match):
        train(compose_config([*BASE, *now, f"resume={ckpt}"]), run_dir=str(tmp_path / "r"))


def _raw_checkpoint(path: str, payload: bytes, header: bytes | None = None) -> None:
    digest = hashlib.sha256(payload).hexdigest().encode()
    if header is None:
        header = b"%s %d sha256=%s size=%d\n" % (MAGIC, VERSION, digest, len(payload))
    with open(path, "wb") as f:
        f.write(header + payload)


@pytest.mark.parametrize("damage", ["no_equals", "bad_size", "bad_version", "pickle_global"])
def test_resume_folder_falls_back_past_a_damaged_newest_file(tmp_path, damage) -> None:
    good = str(tmp_path / "iter_000001.pt")
    save_checkpoint({"iteration": 1}, good)
    old = time.time() - 100
    os.utime(good, (old, old))
    bad = str(tmp_path / "latest.pt")
    buf = io.BytesIO()
    torch.save({"iteration": 2}, buf)
    payload = buf.getvalue()
    if damage == "no_equals":
        _raw_checkpoint(bad, payload, b"%s %d sha256 size\n" % (MAGIC, VERSION))
    elif damage == "bad_size":
        _raw_checkpoint(bad, payload, b"%s %d sha256=ab size=many\n" % (MAGIC, VERSION))
    elif damage == "bad_version":
        _raw_checkpoint(bad, payload, b"%s x sha256=ab size=1\n" % MAGIC)
    else:  # a checksummed payload holding a global the safe loader refuses
        buf = io.BytesIO()
        torch.save({"iteration": 2, "odd": fractions.Fraction(1, 3)}, buf)
        _raw_checkpoint(bad, buf.getvalue())
    with pytest.raises(CheckpointError, match="damaged header|does not load safely"):
        load_checkpoint(bad)
    path, state = load_for_resume(str(tmp_path))
    assert path == good and state["iteration"] == 1
