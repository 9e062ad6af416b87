"""The Hydra training CLI: overrides, outputs, checkpoints and resume, clear errors, multirun."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import torchfrag
from torchfrag.runtime import CheckpointError, load_checkpoint, save_checkpoint
from torchfrag.train import compose_config, config_dir, train

FAST = ["algo.num_envs=4", "algo.steps=64", "algo.epochs=1", "algo.minibatch_size=128",
        "eval_episodes=2", "progress=false"]


def _cli(args: list[str], cwd, timeout: int = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(torchfrag.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, env.get("PYTHONPATH", "")])
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, "-m", "torchfrag.train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_config_dir_found():
    assert os.path.isfile(os.path.join(config_dir(), "config.yaml"))
    cfg = compose_config()
    assert cfg.env.id == "CartPole-v1" and cfg.algo.name == "ppo" and cfg.policy.name == "local"
    assert cfg.logger.backend == "csv"


def test_conf_ships_inside_the_package():
    # torchfrag/conf is a symlink to the top-level conf/ in a checkout and a real folder in a
    # wheel (package data); either way the package finds it next to itself.
    pkg = os.path.dirname(os.path.abspath(torchfrag.__file__))
    assert config_dir() == os.path.join(pkg, "conf")
    pyproject = os.path.join(os.path.dirname(pkg), "pyproject.toml")
    if os.path.isfile(pyproject):
        assert '"conf/*.yaml", "conf/*/*.yaml"' in open(pyproject).read()
        assert os.path.realpath(config_dir()) == os.path.realpath(os.path.join(os.path.dirname(pkg), "conf"))


def test_env_specific_algo_defaults():
    cfg = compose_config(["env=Pendulum-v1"])
    assert cfg.algo.gamma == 0.95 and cfg.algo.reward_scale == 0.1
    assert compose_config(["env=Pendulum-v1", "algo.gamma=0.9"]).algo.gamma == 0.9


def test_cli_run_writes_outputs(tmp_path):
    run_dir = tmp_path / "run"
    proc = _cli([*FAST, "algo.total_frames=1024", "checkpoint_every=2", f"hydra.run.dir={run_dir}"],
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["frames"] == 1024 and summary["iterations"] == 4
    assert len(summary["eval_returns"]) == 2
    assert (run_dir / "learning_curve.png").stat().st_size > 1000
    assert (run_dir / "checkpoints" / "iter_000002.pt").exists()
    assert (run_dir / "checkpoints" / "latest.pt").exists()
    assert (run_dir / ".hydra" / "config.yaml").exists()
    scalars = run_dir / "train" / "scalars" / "train"
    assert (scalars / "loss_objective.csv").exists() and (scalars / "fps.csv").exists()


def test_overrides_change_the_run(tmp_path):
    a = train(compose_config([*FAST, "algo.total_frames=512", "seed=1"]), run_dir=str(tmp_path / "a"))
    b = train(compose_config([*FAST, "algo.total_frames=512", "seed=2"]), run_dir=str(tmp_path / "b"))
    c = train(compose_config([*FAST, "algo.total_frames=512", "seed=1", "algo.steps=32"]),
              run_dir=str(tmp_path / "c"))
    assert a["iterations"] == 2 and c["iterations"] == 4
    wa, wb = (load_checkpoint(s["checkpoint"])["state"]["model"]["actor"] for s in (a, b))
    assert any(not torch.equal(wa[k], wb[k]) for k in wa)
    again = train(compose_config([*FAST, "algo.total_frames=512", "seed=1"]),
                  run_dir=str(tmp_path / "a2"))
    wa2 = load_checkpoint(again["checkpoint"])["state"]["model"]["actor"]
    assert all(torch.equal(wa[k], wa2[k]) for k in wa)


def _flat(obj, prefix=""):
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}{k}/"))
        return out
    if isinstance(obj, (list, tuple)):
        out = {}
        for i, v in enumerate(obj):
            out.update(_flat(v, f"{prefix}{i}/"))
        return out
    return {prefix: obj}


def test_checkpoint_resumes_to_the_same_state(tmp_path):
    first = train(compose_config([*FAST, "algo.total_frames=1024", "checkpoint_every=2",
                                  "eval_episodes=0"]), run_dir=str(tmp_path / "first"))
    mid = str(tmp_path / "first" / "checkpoints" / "iter_000002.pt")
    saved = load_checkpoint(mid)
    # resuming with nothing left to train re-saves exactly the loaded state
    same = train(compose_config([*FAST, "algo.total_frames=512", f"resume={mid}",
                                 "eval_episodes=0"]), run_dir=str(tmp_path / "same"))
    reloaded = load_checkpoint(same["checkpoint"])
    assert reloaded["iteration"] == 2 and same["frames"] == 512
    a, b = _flat(saved["state"]), _flat(reloaded["state"])
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k
    assert torch.equal(saved["rng"], reloaded["rng"])
    # resuming continues the count up to total_frames
    cont = train(compose_config([*FAST, "algo.total_frames=1024", f"resume={mid}",
                                 "eval_episodes=0"]), run_dir=str(tmp_path / "cont"))
    assert cont["frames"] == first["frames"] == 1024 and cont["iterations"] == 4
    lr_first = load_checkpoint(first["checkpoint"])["state"]["learn"]["optimizer"]["param_groups"][0]["lr"]
    lr_cont = load_checkpoint(cont["checkpoint"])["state"]["learn"]["optimizer"]["param_groups"][0]["lr"]
    assert lr_first == lr_cont


def test_checkpoints_are_atomic_and_checksummed(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint({"w": torch.arange(4)}, str(path))
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temp file left
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted"):
        load_checkpoint(str(path))
    path.write_bytes(bytes(data[:-10]))
    with pytest.raises(CheckpointError, match="truncated"):
        load_checkpoint(str(path))
    path.write_bytes(b"not a checkpoint\n")
    with pytest.raises(CheckpointError, match="bad header"):
        load_checkpoint(str(path))


@pytest.mark.parametrize("override, expected", [
    ("env=NoSuchEnv-v0", "env=NoSuchEnv-v0: no such env"),
    ("no_such_key=1", "no_such_key=1: no key 'no_such_key' in the config"),
    ("algo.lr=fast", "Value 'fast' of type 'str' could not be converted to Float"),
])
def test_bad_overrides_fail_in_one_line(tmp_path, override, expected):
    # More cases (in-process) in test_train_cli_messages.py.
    proc = _cli([override], cwd=tmp_path, timeout=120)
    assert proc.returncode == 1
    assert expected in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_unknown_env_id_value_fails_clearly(tmp_path):
    proc = _cli(["env.id=NoSuch-v9", *FAST], cwd=tmp_path, timeout=120)
    assert proc.returncode != 0
    assert "unknown env id 'NoSuch-v9'" in proc.stderr


def test_multirun(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _cli(["-m", "seed=0,1", *FAST, "algo.total_frames=256", "eval_episodes=0", "plot=false",
                 f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seeds = sorted(json.loads((sweep / str(i) / "summary.json").read_text())["seed"] for i in (0, 1))
    assert seeds == [0, 1]


def test_default_ppo_runs_as_many_iterations_as_it_anneals_over(tmp_path, monkeypatch):
    """Issue 25 item 5: one conversion of total_frames into iterations (it was 391 run, 390 annealed)."""
    import torchfrag.runtime as runtime
    from torchfrag.runtime import RunResult

    seen = {}

    def record(graph, policy="local", iterations=1, **kwargs):
        learn = graph.fragment("learn")
        seen.update(run=iterations, anneal=learn.anneal_steps, fpi=graph.loop.cfg.frames_per_iteration)
        return RunResult(graph, 0)

    monkeypatch.setattr(runtime, "run", record)
    cfg = compose_config(["eval_episodes=0", "plot=false", "progress=false"])
    train(cfg, run_dir=str(tmp_path / "default"))
    total = int(cfg.algo.total_frames)
    assert seen["run"] == seen["anneal"], seen
    assert (seen["run"] - 1) * seen["fpi"] < total <= seen["run"] * seen["fpi"]


def test_learning_rate_reaches_zero_on_the_last_iteration(tmp_path, monkeypatch):
    """A total_frames that is not a multiple of an iteration's frames: the schedule ends with the run."""
    from torchfrag.algos.ppo import PPOLoop

    loops = []
    original = PPOLoop.__init__

    def keep(self, *args, **kwargs):
        original(self, *args, **kwargs)
        loops.append(self)

    monkeypatch.setattr(PPOLoop, "__init__", keep)
    out = train(compose_config([*FAST, "algo.total_frames=600", "algo.anneal_lr=true", "eval_episodes=0",
                                "plot=false"]), run_dir=str(tmp_path / "short"))
    assert out["iterations"] == 3 and out["frames"] == 3 * 4 * 64
    lrs = [g["lr"] for g in loops[0].learn.optimizer.param_groups]
    assert lrs == [0.0] * len(lrs)
