"""CLI arguments that used to run with garbage, and resume from damaged or foreign checkpoints."""
from __future__ import annotations

import fractions
import hashlib
import io
import os
import subprocess
import sys
import time

import pytest
import torch
from omegaconf import OmegaConf

import torchfrag

from torchfrag.runtime import CheckpointError, load_checkpoint, save_checkpoint
from torchfrag.runtime.checkpoint import MAGIC, VERSION, load_for_resume
from torchfrag.train import ResumeRefused, compose_config, train

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


def _cli(args: list[str], cwd, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(torchfrag.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, env.get("PYTHONPATH", "")])
    env.pop("HYDRA_FULL_ERROR", None)
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "torchfrag.train", *args, f"hydra.run.dir={cwd}/run"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _assert_one_line_refusal(proc: subprocess.CompletedProcess, run_dir, *parts: str) -> None:
    """rc 1, one line ``torchfrag.train: error: ...`` naming every part, and no training."""
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 1, lines[-20:]
    assert len(lines) == 1, lines
    assert lines[0].startswith("torchfrag.train: error: "), lines
    for part in parts:
        assert part in lines[0], (part, lines[0])
    assert not os.path.exists(run_dir / "checkpoints") and not os.path.exists(run_dir / "summary.json")


# Each of these ran to rc 0 (or a 25-82-line traceback) before it was refused here.
REFUSED = [
    ("algo.gamma=0", ["algo.gamma must be in (0, 1]", "got 0.0"]),
    ("algo.gamma=1.5", ["algo.gamma must be in (0, 1]", "got 1.5"]),
    ("algo.lr=0", ["algo.lr must be a finite number > 0", "got 0.0"]),
    ("algo.lr=inf", ["algo.lr must be a finite number > 0", "got inf"]),
    ("algo.lr=nan", ["algo.lr", "got nan"]),
    ("algo=sac algo.critic_lr=-0.001", ["algo.critic_lr must be a finite number > 0", "got -0.001"]),
    ("algo=sac algo.matmul_dtype=float16", ["algo.matmul_dtype must be one of ['bfloat16', 'float32']",
                                            "got 'float16'"]),
    ("algo.hidden=[64,-1]", ["algo.hidden must list layer sizes >= 1", "got [64, -1]"]),
    ("algo.hidden=[0]", ["algo.hidden", "got [0]"]),
    ("algo.minibatch_size=100000", ["algo.minibatch_size", "at most one iteration's 256 frames",
                                    "got 100000"]),
    ("eval_episodes=-3", ["eval_episodes must be >= 0", "got -3"]),
    ("env.eval_envs=0", ["env.eval_envs must be >= 1", "got 0"]),
    ("target_window=0", ["target_window must be >= 1", "got 0"]),
    ("total_frames=1", ["total_frames=1 is less than one iteration's 256 frames"]),
    (f"total_frames={10**20}", ["total_frames must be at most 2**63 - 1 frames", f"got {10**20}"]),
    ("+algo.foo=1", ["unknown key 'algo.foo' (value 1)", "known algo keys", "gamma"]),
    ("+algo.gama=0.9", ["unknown key 'algo.gama'", "did you mean 'gamma'"]),
    ("+foo=1", ["unknown key 'foo' (value 1)", "known top-level keys"]),
    ("+env.foo=1", ["unknown key 'env.foo'", "eval_envs, id, options"]),
    ("policy=actors policy.env_threads=0", ["policy actors: env_threads must be in [1, 4096]", "got 0"]),
    ("policy=actors policy.env_threads=100000", ["env_threads must be in [1, 4096]", "got 100000"]),
    ("env=Acrobot-v1 +env.options.link_length_1=-1",
     ["env.options of Acrobot-v1: option 'link_length_1' must be in (0, inf), got -1"]),
    ("env=Debug-v0 +env.options.step_sleep_us=1e300", ["option 'step_sleep_us' must be in [0, 3600000000]"]),
    ("env=Debug-v0 +env.options.episode_length=-5",
     ["env.options of Debug-v0: option 'episode_length' must be in [0, 2147483647], got -5"]),
    ("+env.options.gravity=abc", ["option 'gravity' expects a number, got the string 'abc'"]),
]


@pytest.mark.parametrize("override, parts", REFUSED)
def test_bad_value_is_refused_in_one_line_before_training(tmp_path, override, parts) -> None:
    with pytest.raises(ValueError) as err:
        train(compose_config([*BASE, *override.split()]), run_dir=str(tmp_path))
    assert "\n" not in str(err.value)
    for part in parts:
        assert part in str(err.value)
    assert not os.path.exists(tmp_path / "checkpoints")


# The CLI turns every refusal above into one line (one case of each kind: an algo field, a
# top-level count, total_frames, an unknown key, a policy option).
@pytest.mark.parametrize("override, parts", [REFUSED[i] for i in (0, 8, 11, 13, 18, 19)])
def test_cli_refuses_bad_value_in_one_line_before_training(tmp_path, override, parts) -> None:
    _assert_one_line_refusal(_cli(["logger=none", *override.split()], tmp_path), tmp_path / "run", *parts)


def test_cli_refusal_traceback_behind_verbose_flag(tmp_path) -> None:
    for args, extra in ((["-v"], None), ([], {"HYDRA_FULL_ERROR": "1"})):
        proc = _cli([*args, "algo.gamma=0"], tmp_path, extra)
        assert proc.returncode == 1
        assert "Traceback" in proc.stderr and "ValueError: algo.gamma must be in (0, 1]" in proc.stderr


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    """A finished two-iteration PPO run (hidden [64, 64]) and its latest checkpoint."""
    run_dir = tmp_path_factory.mktemp("ppo_run")
    train(compose_config([*FAST, "algo.total_frames=512"]), run_dir=str(run_dir))
    return run_dir, str(run_dir / "checkpoints" / "latest.pt")


def test_resume_into_another_network_shape_is_one_line(ppo_run, tmp_path) -> None:
    # Was a 44-line load_state_dict error after the envs had started.
    _, ckpt = ppo_run
    with pytest.raises(ResumeRefused) as err:
        train(compose_config([*FAST, "algo.hidden=[32,32]", f"resume={ckpt}"]), run_dir=str(tmp_path))
    msg = str(err.value)
    assert "\n" not in msg and "does not fit this run's networks: size mismatch for" in msg
    assert "changed since the checkpoint: algo.hidden=[64, 64] -> [32, 32]" in msg
    assert not os.path.exists(tmp_path / "checkpoints")


def test_cli_resume_into_another_network_shape_is_one_line(ppo_run, tmp_path) -> None:
    _, ckpt = ppo_run
    proc = _cli([*FAST, "algo.hidden=[16]", f"resume={ckpt}"], tmp_path)
    _assert_one_line_refusal(proc, tmp_path / "run", f"resume={ckpt!r} does not fit",
                             "algo.hidden=[64, 64] -> [16]")


def _rewrite(src: str, dst: str, **changes) -> str:
    ckpt = load_checkpoint(src)
    ckpt.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del ckpt[key]
    save_checkpoint(ckpt, dst)
    return dst


@pytest.mark.parametrize("changes, match", [
    # An A2C checkpoint stripped of its config resumed into PPO with rc 0.
    ({"config": None}, "holds no saved config, so its env, algorithm and network shape cannot be checked"),
    ({"iteration": -1}, "has iteration=-1; it must be an integer >= 0"),
    ({"iteration": 10**6}, r"has iteration=1000000, beyond its 512 frames \(256 frames per iteration: "
                           r"at most iteration=2\)"),
])
def test_resume_with_impossible_checkpoint_is_refused(ppo_run, tmp_path, changes, match) -> None:
    _, ckpt = ppo_run
    bad = _rewrite(ckpt, str(tmp_path / "bad.pt"), **changes)
    with pytest.raises(ResumeRefused, match=match):
        train(compose_config([*FAST, f"resume={bad}"]), run_dir=str(tmp_path / "r"))
    assert not os.path.exists(tmp_path / "r" / "checkpoints")


def test_a2c_checkpoint_does_not_resume_into_ppo(tmp_path) -> None:
    a2c = ["algo=a2c", "algo.num_envs=4", "algo.steps=16", "algo.total_frames=64", *BASE]
    train(compose_config(a2c), run_dir=str(tmp_path / "a2c"))
    ckpt = str(tmp_path / "a2c" / "checkpoints" / "latest.pt")
    with pytest.raises(ResumeRefused, match="was trained with algo.name='a2c', but this run has algo.name='ppo'"):
        train(compose_config([*FAST, f"resume={ckpt}"]), run_dir=str(tmp_path / "ppo"))
