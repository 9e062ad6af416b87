"""The CLI takes every registered env id as env=<id>, with its family's settings."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import torchfrag
from torchfrag.envs import list_envs
from torchfrag.train import compose_config


def _cli(args: list[str], cwd, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(torchfrag.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run([sys.executable, "-m", "torchfrag.train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_every_registered_id_composes() -> None:
    from hydra.core.config_store import ConfigStore

    from torchfrag.train import config_dir, register_schemas

    register_schemas()
    stored = set(ConfigStore.instance().list("env"))
    files = set(os.listdir(os.path.join(config_dir(), "env")))
    ids = list_envs()
    assert all(f"{i}.yaml" in stored or f"{i}.yaml" in files for i in ids)
    for env_id in ids[:: max(1, len(ids) // 8)]:  # a sample across families
        assert compose_config([f"env={env_id}"]).env.id == env_id


@pytest.mark.skipif("Breakout-v5" not in list_envs(), reason="Atari not built")
def test_atari_ids_get_the_atari_settings() -> None:
    pong = compose_config(["env=Pong-v5"]).env
    breakout = compose_config(["env=Breakout-v5"]).env
    assert dict(breakout.options) == dict(pong.options) and pong.options
    assert compose_config(["env=Walker2d-v5"]).env.options == {} if "Walker2d-v5" in list_envs() \
        else True


@pytest.mark.parametrize("args", [
    pytest.param(["env=Walker2d-v5", "algo.num_envs=2", "algo.steps=32", "algo.epochs=1",
                  "algo.minibatch_size=32", "algo.total_frames=128"],
                 marks=pytest.mark.skipif("Walker2d-v5" not in list_envs(), reason="no MuJoCo"),
                 id="Walker2d-v5"),
    pytest.param(["env=Breakout-v5", "algo=ppo_atari", "algo.num_envs=2", "algo.steps=16",
                  "algo.epochs=1", "algo.minibatch_size=32", "algo.total_frames=64"],
                 marks=pytest.mark.skipif("Breakout-v5" not in list_envs(), reason="no Atari"),
                 id="Breakout-v5"),
    # Toy text: integer observations, one-hot encoded for the networks.
    pytest.param(["env=FrozenLake-v1", "algo=ppo", "algo.num_envs=2", "algo.steps=32",
                  "algo.epochs=1", "algo.minibatch_size=32", "algo.total_frames=128"],
                 id="FrozenLake-v1"),
    pytest.param(["env=Blackjack-v1", "algo=ppo", "algo.num_envs=2", "algo.steps=32",
                  "algo.epochs=1", "algo.minibatch_size=32", "algo.total_frames=128"],
                 id="Blackjack-v1"),
    # Box2D, with its algo_env preset (16 envs) shrunk to a smoke run.
    pytest.param(["env=LunarLanderContinuous-v3", "algo=ppo", "algo.num_envs=2", "algo.steps=32",
                  "algo.epochs=1", "algo.minibatch_size=32", "algo.total_frames=128"],
                 id="LunarLanderContinuous-v3"),
    # MiniGrid: grid codes flattened for the MLP, with its PPO preset.
    pytest.param(["env=MiniGrid-DoorKey-5x5-v0", "algo=ppo_minigrid", "algo.num_envs=2",
                  "algo.steps=32", "algo.epochs=1", "algo.minibatch_size=32",
                  "algo.total_frames=128"],
                 id="MiniGrid-DoorKey-5x5-v0"),
    # No time limit in Gymnasium: the CLI's env config caps episodes, else evaluation never ends.
    pytest.param(["env=CliffWalking-v1", "algo=ppo", "algo.num_envs=2", "algo.steps=32",
                  "algo.epochs=1", "algo.minibatch_size=32", "algo.total_frames=128"],
                 id="CliffWalking-v1"),
])
def test_cli_short_run(tmp_path, args: list[str]) -> None:
    run_dir = tmp_path / "run"
    proc = _cli([*args, "eval_episodes=1", "progress=false", "plot=false",
                 f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env"] == args[0].split("=", 1)[1]
    assert summary["frames"] == int(args[-1].split("=")[1])
    assert len(summary["eval_returns"]) == 1
