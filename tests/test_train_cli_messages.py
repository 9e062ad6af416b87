"""The training CLI's own messages: Hydra's composition errors in one line, ``--help``
without ``*_schema`` entries."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from test_train_misuse import _cli  # the real command, run from a temporary folder

from torchfrag import train as train_mod
from torchfrag.cli_messages import composition_error_line, visible_options


def _main_refusal(args: list[str], monkeypatch, capsys) -> str:
    """Runs the CLI's ``main()`` in this process; returns the one-line refusal it exits with."""
    monkeypatch.setattr(sys, "argv", ["torchfrag.train", *args])
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setitem(train_mod._FULL_ERRORS, "asked", False)
    monkeypatch.setitem(train_mod._FULL_ERRORS, "composed", False)
    with pytest.raises(SystemExit) as exit_info:
        train_mod.main()
    out = capsys.readouterr()
    assert out.out == "" and out.err == "", out  # nothing printed besides the exit line
    assert "HYDRA_FULL_ERROR" not in os.environ  # main() leaves the user's setting as it was
    line = exit_info.value.code
    assert isinstance(line, str) and "\n" not in line, line
    assert line.startswith("torchfrag.train: error: "), line
    return line


# Each printed 6-7 lines (an options listing, the search path, a HYDRA_FULL_ERROR hint) or a
# 30-line traceback before.
COMPOSITION_ERRORS = [
    (["algo=nope"], ["algo=nope: no such algo; choose one of: a2c, dqn,", "sac_mujoco"]),
    (["policy=nope"], ["policy=nope: no such policy", "actors", "local"]),
    (["env=NoSuchEnv-v0"], ["env=NoSuchEnv-v0: no such env", "--help` lists them"]),
    (["env=CartPol-v1"], ["env=CartPol-v1: no such env; did you mean CartPole-v1"]),
    (["algo="], ["algo= needs an option; choose one of: a2c"]),
    (["algo.lr=[1"], ["cannot parse override 'algo.lr=[1'", "key=value, +key=value"]),
    (["=3"], ["cannot compose the config from '=3 ", "Got int"]),
    (["foo=1"], ["foo=1: no key 'foo' in the config", "seed", "a new key is added with +foo=1"]),
    (["algo.lrr=1"], ["algo.lrr=1: no key 'algo.lrr'", "did you mean 'lr'?", "algo keys: "]),
    (["algo.lr=fast"], ["algo.lr=fast: Value 'fast' of type 'str' could not be converted to Float"]),
    (["seed=abc"], ["seed=abc: ", "converted to Integer"]),
    (["algo.num_envs=2.5"], ["algo.num_envs=2.5: ", "converted to Integer"]),
    (["algo.hidden=abc"], ["algo.hidden=abc: ", "not a ListConfig, list or tuple"]),
    (["algo.hidden.0=x"], ["algo.hidden.0=x: ", "converted to Integer"]),
    (["env.options=3"], ["env.options=3: Cannot assign int"]),
    (["policy=actors", "policy.env_threads=abc"], ["policy.env_threads=abc: ", "Integer"]),
    (["+algo.lr=3"], ["An item is already at 'algo.lr'", "++algo.lr=3"]),
    (["~foo"], ["Could not delete from config. 'foo' does not exist"]),
    (["-m", "seed=0,1", "algo.lr=x"], ["algo.lr=x: "]),
]


@pytest.mark.parametrize("args, parts", COMPOSITION_ERRORS, ids=[" ".join(a) for a, _ in COMPOSITION_ERRORS])
def test_composition_error_is_one_line(args, parts, monkeypatch, capsys, tmp_path) -> None:
    line = _main_refusal([*args, f"hydra.run.dir={tmp_path}/run"], monkeypatch, capsys)
    for part in parts:
        assert part in line, (part, line)
    assert "_schema" not in line
    assert not os.path.exists(tmp_path / "run")


def test_cli_composition_errors_print_one_line(tmp_path) -> None:
    """The real command: rc 1 and one line on stderr; the detail behind -v / HYDRA_FULL_ERROR."""
    proc = _cli(["algo=nope"], tmp_path)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 1 and lines == [
        "torchfrag.train: error: algo=nope: no such algo; choose one of: a2c, dqn, dqn_cleanrl, impala, "
        "ppo, ppo_atari, ppo_cleanrl, ppo_minigrid, ppo_mujoco, sac, sac_mujoco"], lines
    proc = _cli(["-v", "algo.lr=fast"], tmp_path)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "ConfigCompositionException" in proc.stderr
    proc = _cli(["env=NoSuchEnv-v0"], tmp_path, {"HYDRA_FULL_ERROR": "1"})
    assert proc.returncode == 1 and "MissingConfigException" in proc.stderr


def test_visible_options_hide_schemas() -> None:
    assert visible_options(["ppo_schema", "sac", "ppo"]) == ["ppo", "sac"]


def test_unknown_exception_still_names_the_overrides() -> None:
    line = composition_error_line(RuntimeError("boom\nmore"), ["a=1", "b=2"])
    assert line == "cannot compose the config from 'a=1 b=2': boom; more"


def test_total_frames_counts_the_random_warm_up(tmp_path, monkeypatch) -> None:
    """``total_frames=2048`` with 1,000 warm-up frames ended at 3,048 frames; now at the first
    whole iteration past 2,048 (TorchRL counts ``init_random_frames`` in ``total_frames``).
    The progress bar's total, its last position, the CSV log's last step and the summary agree."""
    import csv

    import tqdm

    from torchfrag.train import compose_config, train

    bars = []

    class Bar(tqdm.tqdm):
        def close(self) -> None:
            bars.append((self.total, self.n))
            super().close()

    monkeypatch.setattr(tqdm, "tqdm", Bar)
    cfg = compose_config(["algo=dqn", "env=CartPole-v1", "total_frames=2048", "eval_episodes=0",
                          "plot=false", "checkpoint_every=0", "algo.updates=2"])
    summary = train(cfg, run_dir=str(tmp_path))
    # 1,000 random frames (125 steps of 8 envs), then ceil(1,048 / 128) = 9 iterations of 8 x 16.
    assert summary["frames"] == 1000 + 9 * 128 == 2152 and summary["iterations"] == 9
    assert bars and set(bars) == {(2152, 2152)}  # (close may run again from __del__)
    with open(tmp_path / "train" / "scalars" / "train" / "fps.csv") as f:  # rows: step (frames), fps
        steps = [int(row[0]) for row in csv.reader(f)]
    assert steps and steps[-1] == 2152 and steps[0] == 1000 + 128


def test_logger_wandb_without_the_package_is_one_line(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed, even where it is
    line = _main_refusal(["logger=wandb", f"hydra.run.dir={tmp_path}/run"], monkeypatch, capsys)
    assert line == ("torchfrag.train: error: logger=wandb needs the `wandb` package: pip install "
                    "wandb (offline runs need no account), or use logger=csv")
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


class _FakeConfig:
    def __init__(self, values: dict) -> None:
        self.values = values

    def update(self, values, allow_val_change: bool = False) -> None:
        self.values.update(values)


class _FakeRun:
    """What TorchRL's WandbLogger uses of a ``wandb.init`` run."""

    def __init__(self, **kwargs) -> None:
        self.kwargs, self.rows, self.values, self.finished, self.id = kwargs, [], {}, False, "fake"
        self.config = _FakeConfig(self.values)

    def log(self, payload, **kwargs) -> None:
        self.rows.append(dict(payload))

    def define_metric(self, *args, **kwargs) -> None:
        pass

    def finish(self) -> None:
        self.finished = True


def _fake_wandb(monkeypatch) -> list:
    """A ``wandb`` module that records its runs (the real one is not a test dependency)."""
    import importlib.machinery
    import types

    import torchrl.record.loggers.wandb as torchrl_wandb

    runs = []
    fake = types.ModuleType("wandb")
    fake.__spec__ = importlib.machinery.ModuleSpec("wandb", None)

    def init(**kwargs):
        runs.append(_FakeRun(**kwargs))
        return runs[-1]

    fake.init = init
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setattr(torchrl_wandb, "_has_wandb", True)
    monkeypatch.delenv("WANDB_MODE", raising=False)  # TorchRL sets it for offline runs
    return runs


def test_logger_wandb_logs_offline_into_the_run_dir(monkeypatch, tmp_path) -> None:
    """``logger=wandb`` goes through TorchRL's WandbLogger: offline, in the run folder, the
    config recorded, training and evaluation scalars logged, the run finished."""
    from torchfrag.train import compose_config, train

    runs = _fake_wandb(monkeypatch)
    cfg = compose_config(["logger=wandb", "algo.num_envs=4", "algo.steps=64", "algo.epochs=1",
                          "algo.minibatch_size=128", "total_frames=512", "eval_episodes=1",
                          "progress=false", "plot=false"])
    summary = train(cfg, run_dir=str(tmp_path))
    assert len(runs) == 1
    run = runs[0]
    assert run.kwargs["mode"] == "offline" and run.kwargs["dir"] == str(tmp_path)
    assert run.kwargs["project"] == "torchfrag" and run.kwargs["name"] == "train"
    assert os.environ.get("WANDB_MODE") in ("offline", "dryrun")  # nothing dials out
    assert run.values["algo"]["name"] == "ppo" and run.values["env"]["id"] == "CartPole-v1"
    keys = set().union(*run.rows)
    assert {"train/fps", "train/loss", "eval/episode_return"} <= keys, keys
    assert run.finished and summary["frames"] == 512


def test_logger_wandb_mode_is_checked(monkeypatch, capsys, tmp_path) -> None:
    _fake_wandb(monkeypatch)
    line = _main_refusal(["logger=wandb", "logger.mode=cloud", f"hydra.run.dir={tmp_path}/run"],
                         monkeypatch, capsys)
    assert line.endswith("logger.mode='cloud' is not one of offline, online, disabled"), line


def test_learning_curve_legend_is_outside_the_axes(tmp_path) -> None:
    import matplotlib.pyplot as plt
    from PIL import Image

    from torchfrag.train_plot import learning_curve_figure, save_learning_curve

    # A curve that rises into the lower-right corner, where the legend used to sit.
    curve = [(i * 100, float(i)) for i in range(1, 60)]
    fig = learning_curve_figure(curve, [55.0, 57.0], "ppo on CartPole-v1 (seed 0)")
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        legend = ax.get_legend()
        assert [t.get_text() for t in legend.get_texts()] == [
            "training episode return (mean per iteration)", "final evaluation (mean of 2)"]
        box, axes_box = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert box.y1 <= axes_box.y0 and not box.overlaps(axes_box), (box, axes_box)
        assert len(ax.texts) == 0
    finally:
        plt.close(fig)
    path = tmp_path / "curve.png"
    save_learning_curve(curve, [55.0], str(path), "t")
    with Image.open(path) as img:  # the legend is inside the saved image (bbox_inches="tight")
        assert img.size[1] > img.size[0] * 0.6


def test_learning_curve_says_when_no_episode_finished(tmp_path) -> None:
    """A run too short for one episode (Pendulum: 200 steps per episode) says so on its plot."""
    import matplotlib.pyplot as plt

    from torchfrag.train import compose_config, train
    from torchfrag.train_plot import learning_curve_figure

    fig = learning_curve_figure([], [], "t", frames=128)
    try:
        assert [t.get_text() for t in fig.axes[0].texts] == ["no training episode finished in 128 frames"]
        assert fig.axes[0].get_legend() is None
    finally:
        plt.close(fig)
    summary = train(compose_config(["env=Pendulum-v1", "algo.num_envs=2", "algo.steps=64",
                                    "algo.minibatch_size=64", "algo.epochs=1", "total_frames=128",
                                    "eval_episodes=0", "progress=false", "logger=none"]),
                    run_dir=str(tmp_path))
    assert summary["train_return"] is None and (tmp_path / "learning_curve.png").stat().st_size > 0


def test_help_lists_groups_without_schema_entries(monkeypatch, capsys, tmp_path) -> None:
    """``--help`` listed ``ppo_schema``, ``actors_schema``, ``logger_schema``... in every group."""
    own = tmp_path / "my_conf" / "policy"
    own.mkdir(parents=True)
    (own / "my_actors.yaml").write_text("defaults:\n  - actors_schema\nactors: 2\n")
    monkeypatch.setattr(sys, "argv", ["torchfrag.train", "--help", "--config-dir",
                                      str(tmp_path / "my_conf")])
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setitem(train_mod._FULL_ERRORS, "asked", False)
    monkeypatch.setitem(train_mod._FULL_ERRORS, "composed", False)
    with pytest.raises(SystemExit) as exit_info:
        train_mod.main()
    assert exit_info.value.code in (None, 0)
    listing = capsys.readouterr().out.split("== Config ==")[0]
    groups = dict(line.split(": ", 1) for line in listing.splitlines() if ": " in line)
    assert set(groups) == {"algo", "algo_env", "env", "logger", "policy"}, listing[:2000]
    assert "_schema" not in listing
    assert groups["logger"] == "csv, none, tensorboard, wandb"
    assert groups["algo"].startswith("a2c, dqn, dqn_cleanrl, impala, ppo,")
    assert "my_actors" in groups["policy"].split(", ") and "local" in groups["policy"]
    assert "CartPole-v1" in groups["env"].split(", ")


def _start_cli(args: list[str], cwd) -> subprocess.Popen:
    """The real command with Ctrl-C's default disposition (a background shell would ignore it)."""
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(train_mod.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-m", "torchfrag.train", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _interrupt(proc: subprocess.Popen) -> tuple[float, list[str]]:
    """Sends SIGINT; returns the seconds to exit and every line printed."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return time.monotonic() - t0, (out + err).strip().splitlines()


def test_ctrl_c_during_training_is_one_line_and_a_clean_exit(tmp_path) -> None:
    """Ctrl-C mid-run: status 130 within seconds, one line saying where it stopped and what
    to resume from, no traceback, no warning after it."""
    run = tmp_path / "run"
    proc = _start_cli(["algo.num_envs=4", "algo.steps=64", "algo.epochs=1", "algo.minibatch_size=128",
                       "total_frames=100000000", "checkpoint_every=1", "logger=none", "progress=false",
                       f"hydra.run.dir={run}"], tmp_path)
    try:
        deadline = time.monotonic() + 240
        while not (run / "checkpoints" / "latest.pt").exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        assert (run / "checkpoints" / "latest.pt").exists()
        seconds, lines = _interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, lines[-20:]
    assert seconds < 10, seconds
    assert not any("Traceback" in line or "Warning" in line for line in lines), lines[-20:]
    last = lines[-1]
    assert "interrupted (Ctrl-C) at " in last and f"resume={run}/checkpoints/iter_" in last, last
    assert sum("interrupted" in line for line in lines) == 1


def test_ctrl_c_while_starting_is_one_line(tmp_path) -> None:
    """Ctrl-C while torch and the env pool import: it was a 22-57-line traceback (or, inside
    torch's import, a SIGSEGV)."""
    for delay in (0.5, 2.0):
        proc = _start_cli(["logger=none", f"hydra.run.dir={tmp_path}/run"], tmp_path)
        time.sleep(delay)
        if proc.poll() is not None:  # pragma: no cover - started and ended within the delay
            continue
        _, lines = _interrupt(proc)
        assert proc.returncode == 130, lines[-20:]
        assert len(lines) == 1 and lines[0].startswith("torchfrag.train: interrupted (Ctrl-C)"), lines


def test_a_placement_the_policy_refuses_is_one_line_before_the_listing(tmp_path) -> None:
    """The real command: the refusal comes before the captured loop's listing and any process."""
    from test_train_misuse import _assert_one_line_refusal

    proc = _cli(["algo=ppo", "policy=apex", "total_frames=4096"], tmp_path)
    _assert_one_line_refusal(proc, tmp_path / "run", "policy apex: loop 'PPOLoop' has no replay buffer",
                             "e.g. algo=dqn")


def test_the_documented_apex_command_runs(tmp_path) -> None:
    """docs/policies.md's `algo=dqn policy=apex`: the shipped DQN's epsilon annealing writes no key,
    so it stays on the learner (it was refused as a fragment feeding the replay write)."""
    proc = _cli(["algo=dqn", "policy=apex", "policy.actors=2", "algo.num_envs=4", "algo.learning_starts=64",
                 "total_frames=512", "eval_episodes=0", "plot=false", "progress=false", "logger=none"],
                tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "done: " in proc.stdout + proc.stderr
