"""The device benchmark's single entry and the pool thread-scaling benchmark, on the CPU.

No figure is asserted (speed goals live in the benchmarks): these tests check
that ``python -m benchmarks.device`` plans the sections the issue lists, says
which ones it skips and why, keeps earlier figures when a later command skips
them, and that the scaling benchmark measures, tabulates and plots for real.
"""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from benchmarks import _common, device, pool_scaling

GPU_SECTIONS = ["gpu-envs", "warp", "gpu-ppo", "ppo-halfcheetah"]


def test_plan_without_cuda_runs_the_cpu_sections_and_names_every_skip() -> None:
    todo, skipped = device.plan(None, cuda=False)
    assert todo == ["cpu-envs", "cpu-ppo"]
    for name in GPU_SECTIONS:
        assert skipped[name] == "skipped: no CUDA"
    assert "not the lent CUDA machine" in skipped["scaling"]
    # Asked for explicitly, the scaling section runs on any machine; GPU sections still skip.
    todo, skipped = device.plan(["scaling", "gpu-ppo"], cuda=False)
    assert todo == ["scaling"] and skipped["gpu-ppo"] == "skipped: no CUDA"


def test_plan_with_cuda_runs_every_gpu_figure_and_the_long_one_on_request() -> None:
    todo, skipped = device.plan(None, cuda=True)
    assert todo == ["cpu-envs", "cpu-ppo", "gpu-envs", "warp", "gpu-ppo", "scaling"]
    assert skipped == {"ppo-halfcheetah": "skipped: opt-in (--long): 10M frames of PPO "
                                          "HalfCheetah on MuJoCo Warp"}
    todo, _ = device.plan(None, cuda=True, long=True)
    assert todo[-1] == "ppo-halfcheetah"
    with pytest.raises(ValueError, match=r"sections \['gpu'\] unknown"):
        device.plan(["gpu"], cuda=True)


def test_main_on_cpu_prints_the_skips_and_keeps_earlier_figures(tmp_path, monkeypatch,
                                                                 capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only behaviour")
    monkeypatch.setattr(_common, "RESULTS_DIR", str(tmp_path))
    earlier = {"sections": {"gpu-ppo": {"gpu": "some GPU", "ppo_throughput": {"frames_per_s": 1.0}}}}
    (tmp_path / "device.json").write_text(json.dumps(earlier))
    device.main(["--sections", "gpu-ppo", "warp"])
    out = capsys.readouterr().out
    assert "sections: running []" in out
    assert "gpu-ppo: skipped: no CUDA" in out and "warp: skipped: no CUDA" in out
    assert "ppo-halfcheetah: skipped: no CUDA" in out and "cpu-envs: skipped: not requested" in out
    saved = json.loads((tmp_path / "device.json").read_text())
    assert saved["sections"]["gpu-ppo"] == earlier["sections"]["gpu-ppo"]  # a skip hides nothing
    assert saved["sections"]["warp"] == {"skipped": "skipped: no CUDA"}
    assert saved["info"]["gpu_model"] is None and saved["info"]["cpu_model"]
    # A file from before the sections: its CPU figures survive under the section names.
    (tmp_path / "device.json").write_text(json.dumps(
        {"info": {"cpu_model": "old CPU", "gpu_model": None}, "cpu_envs": {"winner": "x"}}))
    device.main(["--sections", "gpu-envs"])
    saved = json.loads((tmp_path / "device.json").read_text())
    assert saved["sections"]["cpu-envs"]["winner"] == "x"
    assert saved["sections"]["cpu-envs"]["cpu"] == "old CPU"


def test_thread_counts_and_efficiency() -> None:
    assert pool_scaling.thread_counts([16, 1, 2, 2, 8], cores=8) == [1, 2, 8]
    with pytest.raises(ValueError, match=r"threads must be >= 1, got \[0\]"):
        pool_scaling.thread_counts([0, 1])
    with pytest.raises(ValueError, match="none fits on 2 cores"):
        pool_scaling.thread_counts([4, 8], cores=2)
    eff = pool_scaling.efficiency({1: 1000.0, 2: 1500.0})
    assert eff == {1: 1.0, 2: 0.75}
    assert all(v != v for v in pool_scaling.efficiency({2: 10.0}).values())  # no 1-thread figure


def test_scaling_run_measures_tabulates_and_plots(tmp_path, capsys) -> None:
    systems = ["torchfrag"] + (["envpool"] if importlib.util.find_spec("envpool") else [])
    out = str(tmp_path / "scaling")
    report = pool_scaling.run(threads=[1], rounds=1, seconds=0.1, tasks=["HalfCheetah-v5"],
                              systems=systems, out=out)
    (res,) = report["results"]
    (row,) = res["rows"]
    assert row["threads"] == 1 and row["num_envs"] == 4 and row["batch_size"] == 2
    for name in systems:
        assert row["median_frames_per_s"][name] > 0 and row["efficiency"][name] == 1.0
    assert report["cpu_model"] == device.cpu_model()
    saved = json.loads((tmp_path / "scaling.json").read_text())
    assert saved["results"][0]["rows"][0]["threads"] == 1
    assert (tmp_path / "scaling.png").stat().st_size > 0
    assert "| HalfCheetah-v5 | 1 | 4 |" in capsys.readouterr().out
    with pytest.raises(ValueError, match="tasks \\['Breakout-v5'\\] not measured"):
        pool_scaling.run(threads=[1], tasks=["Breakout-v5"], out=out)


@pytest.mark.slow
def test_ppo_halfcheetah_warp_section_runs_on_the_cpu() -> None:
    """The GPU session's PPO HalfCheetah section, on Warp's CPU mode with a tiny configuration."""
    pytest.importorskip("warp")
    pytest.importorskip("mujoco_warp")
    cfg = {"num_envs": 4, "steps": 8, "minibatch_size": 16, "epochs": 1, "hidden": [16],
           "obs_norm": True, "total_frames": 4 * 8 * 4}
    out = device.ppo_halfcheetah_warp("cpu", cfg, eval_episodes=2, eval_steps=5, compile=False)
    assert out["iterations"] == 4 and out["frames"] == 128 and out["frames_per_s"] > 0
    assert out["device"] == "cpu" and out["eval_steps"] == 5
    assert out["eval_return"] == out["eval_return"]  # a number, not NaN


@pytest.mark.parametrize("module", [device, pool_scaling])
def test_docstring_examples(module) -> None:
    import doctest

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=True)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("env_id", ["Hopper-v5"])
def test_warp_vs_pool_runs_on_the_cpu(env_id: str, capsys) -> None:
    """The GPU session's ``warp`` section, on Warp's CPU mode with a few worlds."""
    pytest.importorskip("warp")
    pytest.importorskip("mujoco_warp")
    out = device.warp_vs_pool(env_id, torch.device("cpu"), 0.05, 1, n=2, threads=1)
    assert out["env_id"] == env_id and out["pool_envs"] == 4 and out["pool_threads"] == 1
    assert out["warp"] > 0 and out["cpp_pool"] > 0 and out["ratio"] == out["warp"] / out["cpp_pool"]
    assert f"{env_id} env steps/s" in capsys.readouterr().out


def test_gpu_check_script_without_cuda_runs_the_cpu_sections_and_exits_0(tmp_path) -> None:
    """``benchmarks/gpu_check.sh`` as the GPU session runs it, on a machine without CUDA.

    It must say that CUDA is absent, still run the ``cuda``-marked tests (which
    skip), run the CPU section it is given, write every figure into its own
    output folder (never into ``benchmarks/results``) and exit 0.
    """
    import os
    import subprocess
    import sys

    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only behaviour")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "gpu_check"
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    proc = subprocess.run(
        ["bash", os.path.join(root, "benchmarks", "gpu_check.sh"), "--no-install", "--quick",
         "--cpu-sections", "cpu-envs", "--out", str(out), "--budget", "400"],
        cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = (out / "summary.txt").read_text()
    assert "CUDA: not available" in summary
    assert "pytest_cuda: ok" in summary and "cpu_sections: ok" in summary, summary
    assert "skipped" in (out / "pytest_cuda.txt").read_text()  # the CUDA cases skip, none fails
    machine = (out / "machine.txt").read_text()
    assert "cpu: " in machine and "available False" in machine
    saved = json.loads((out / "device.json").read_text())
    assert saved["sections"]["cpu-envs"]["systems"]["C++ pool raw"]["median"] > 0
    assert saved["sections"]["gpu-ppo"] == {"skipped": "skipped: no CUDA"}
    assert (out / "device.png").stat().st_size > 0


def test_gpu_check_script_refuses_bad_options(tmp_path) -> None:
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "benchmarks", "gpu_check.sh")
    for args, message in [(["--budget", "soon"], "--budget must be whole seconds, got 'soon'"),
                          (["--frobnicate"], "unknown option '--frobnicate'"),
                          (["--site", str(tmp_path / "nowhere")], "is not a folder")]:
        proc = subprocess.run(["bash", script, "--out", str(tmp_path / "o"), *args], cwd=root,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)


def test_gpu_plot_draws_saved_gpu_sections_and_nothing_without_them(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(_common, "RESULTS_DIR", str(tmp_path))
    assert device.gpu_plot({"gpu-envs": {"skipped": "skipped: no CUDA"}}) is None
    sections = {
        "gpu-envs": {"gpu": "GPU X", "env_steps": {
            str(n): {k: {"median": float(n) * m} for k, m in (("float64", 1e4), ("float32", 2e4))}
            for n in (4096, 65536)}},
        "warp": {"gpu": "GPU X", "Hopper-v5": {"warp": 10.0, "cpp_pool": 20.0, "ratio": 0.5,
                                              "pool_threads": 16, "warp_envs": 4096}},
    }
    path = device.gpu_plot(sections)
    assert path == str(tmp_path / "device_gpu.png") and (tmp_path / "device_gpu.png").stat().st_size > 0
