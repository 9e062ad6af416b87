"""A user's own algorithm (tests/user_algo: config + factory module) from the training CLI.

The REINFORCE loop in ``tests/user_algo/reinforce_loops.py`` is not shipped and
not registered anywhere: its config names its factory with ``_target_`` and is
found through ``hydra.searchpath``, as in the README section "Your own
algorithm from the command line".
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest
import torch

import torchfrag
from torchfrag.algos import AlgoFactory, factory_from_config
from torchfrag.runtime import load_checkpoint

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "user_algo")
SEARCH = f"hydra.searchpath=[file://{os.path.join(HERE, 'conf')}]"


def _cli(args: list[str], cwd, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(torchfrag.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([HERE, pkg_root, env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run([sys.executable, "-m", "torchfrag.train", "algo=reinforce", SEARCH,
                           "progress=false", "plot=false", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_user_algorithm_trains_checkpoints_and_resumes_from_the_cli(tmp_path):
    # trains: 20k frames of REINFORCE lift CartPole well above a random policy's ~22
    full = _cli(["algo.total_frames=20480", "checkpoint_every=20", f"hydra.run.dir={tmp_path / 'full'}"],
                cwd=tmp_path)
    assert full.returncode == 0, full.stderr[-3000:]
    s = _summary(tmp_path / "full")
    assert s["algo"] == "reinforce" and s["frames"] == 20480 and s["iterations"] == 40
    assert s["train_return"] > 60 and s["eval_return"] > 60, s
    mid = tmp_path / "full" / "checkpoints" / "iter_000020.pt"
    ckpt = load_checkpoint(str(mid))
    # the standard hooks: every parameter of the loop, the Learn fragment's optimizer, the frames
    state = ckpt["state"]
    assert any(k.startswith("policy_net.") for k in state["model"]["loop"])
    assert list(state["learn"]) == ["update"] and state["frames"] == 10240
    assert state["learn"]["update"]["calls"] == 20

    # resuming with nothing left to train re-saves exactly the loaded state
    same = _cli(["algo.total_frames=10240", "eval_episodes=0", f"resume={mid}",
                 f"hydra.run.dir={tmp_path / 'same'}"], cwd=tmp_path)
    assert same.returncode == 0, same.stderr[-3000:]
    again = load_checkpoint(_summary(tmp_path / "same")["checkpoint"])["state"]
    for k, v in state["model"]["loop"].items():
        assert torch.equal(v, again["model"]["loop"][k]), k
    assert again["learn"]["update"]["calls"] == 20 and again["frames"] == 10240

    # resuming continues to total_frames, from the saved weights and optimizer
    cont = _cli(["algo.total_frames=20480", "eval_episodes=2", f"resume={mid}",
                 f"hydra.run.dir={tmp_path / 'cont'}"], cwd=tmp_path)
    assert cont.returncode == 0, cont.stderr[-3000:]
    c = _summary(tmp_path / "cont")
    assert c["frames"] == 20480 and c["iterations"] == 40 and "resumed from" in cont.stderr + cont.stdout
    final = load_checkpoint(c["checkpoint"])["state"]
    assert final["learn"]["update"]["calls"] == 40
    assert c["train_return"] > 60, c


def test_user_factory_is_picklable_and_builds_a_worker_slice():
    sys.path.insert(0, HERE)
    try:
        f = factory_from_config({"_target_": "reinforce_loops.ReinforceFactory", "name": "reinforce",
                                 "num_envs": 4, "steps": 8}, "CartPole-v1", seed=3)
        assert isinstance(f, AlgoFactory) and type(f).__name__ == "ReinforceFactory"
        assert f.config().num_envs == 4 and f.config().lr == 1e-2
        g = pickle.loads(pickle.dumps(f))
        from torchfrag.policies.factory import EnvSlice

        loop = g(EnvSlice(offset=2, count=2, total=4))
        try:
            assert loop.collect().batch_size == torch.Size([2, 8])
        finally:
            loop.env_.close()
    finally:
        sys.path.remove(HERE)


@pytest.mark.parametrize("node, match", [
    ({"_target_": "no_such_module.Factory", "name": "x"}, "could not be imported"),
    ({"_target_": "torchfrag.algos.AlgoConfig", "name": "x"}, "must name a subclass of"),
    ({"name": "reinforce"}, "unknown algo 'reinforce'"),
])
def test_bad_algo_target_is_a_clear_error(node, match):
    with pytest.raises(ValueError, match=match):
        factory_from_config(node, "CartPole-v1")


def test_unknown_algo_from_the_cli_says_how_to_add_one(tmp_path):
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "torchfrag.train", "algo=reinforce", "progress=false"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "reinforce" in proc.stderr
