"""Build the extension with sanitizers in a scratch folder and run the pool stress workload.

Modes:
  address  AddressSanitizer + UndefinedBehaviorSanitizer (leak detection off: the
           interpreter itself never frees some memory)
  leak     the address build again with LeakSanitizer on; only leaks whose stack
           goes through torchfrag's code count
  thread   ThreadSanitizer

Each mode copies the checkout (sources only) into ``<scratch>/<mode>``, builds
``torchfrag._C`` there with ``TORCHFRAG_SANITIZE``, runs
``tests/sanitizers/stress.py`` with the sanitizer runtime preloaded (Python
itself is not instrumented) and counts the reports. Exit status 1 if any mode
reports anything.

Usage:
    python tests/sanitizers/run.py                       # address, leak, thread
    python tests/sanitizers/run.py --modes address --scale 0.3
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RUNTIME = {"address": "libasan.so", "leak": "libasan.so", "thread": "libtsan.so"}
BUILD = {"address": "address", "leak": "address", "thread": "thread"}
REPORT_PATTERNS = {
    "address": [r"ERROR: AddressSanitizer", r"runtime error:"],
    "leak": [r"ERROR: LeakSanitizer"],
    "thread": [r"WARNING: ThreadSanitizer", r"ERROR: ThreadSanitizer"],
}


def runtime_library(name: str) -> str | None:
    """Path of a sanitizer runtime from the C++ compiler, or None."""
    try:
        out = subprocess.run(["g++", f"-print-file-name={name}"], capture_output=True, text=True,
                             check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out if os.path.isabs(out) and os.path.exists(out) else None


def copy_sources(dest: str) -> None:
    """Copies the checkout without build products, virtual envs or git data."""
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "*.so", "__pycache__", "outputs",
                                    "multirun", "results", ".pytest_cache", ".hypothesis")
    if os.path.exists(dest):
        shutil.rmtree(dest)
    shutil.copytree(ROOT, dest, ignore=ignore)
    # Reuse downloaded native sources (e.g. the ALE headers) instead of fetching again.
    native = os.path.join(ROOT, "build", "native")
    if os.path.isdir(native):
        shutil.copytree(native, os.path.join(dest, "build", "native"))


def build(src: str, mode: str) -> float:
    env = dict(os.environ, TORCHFRAG_SANITIZE=BUILD[mode])
    start = time.time()
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "--force"], cwd=src,
                   env=env, check=True, stdout=subprocess.DEVNULL)
    return time.time() - start


def count_reports(text: str, mode: str) -> int:
    if mode == "leak":
        # A leak counts only when its allocation stack passes through our code.
        blocks = re.split(r"\n(?=(?:Direct|Indirect) leak of)", text)
        return sum(1 for b in blocks if re.match(r"(Direct|Indirect) leak of", b)
                   and ("torchfrag" in b or "_C.cpython" in b or "csrc/" in b))
    return sum(len(re.findall(p, text)) for p in REPORT_PATTERNS[mode])


def run_mode(mode: str, scratch: str, scale: float, built: dict[str, float],
             timeout: float = 1800.0) -> dict:
    lib = runtime_library(RUNTIME[mode])
    if lib is None:
        return {"mode": mode, "status": "skipped", "why": f"{RUNTIME[mode]} not found"}
    # The leak pass reuses the address build of the same run.
    src = os.path.join(scratch, BUILD[mode])
    if BUILD[mode] not in built:
        copy_sources(src)
        built[BUILD[mode]] = build(src, mode)
    build_s = built[BUILD[mode]]
    # libstdc++ is preloaded too: the sanitizer's __cxa_throw interceptor needs
    # the real one at start-up, before the extension dlopens it.
    preload = [lib] + [p for p in [runtime_library("libstdc++.so.6")] if p]
    env = dict(os.environ, LD_PRELOAD=" ".join(preload), PYTHONPATH=src, PYTHONMALLOC="malloc",
               OMP_NUM_THREADS="1")
    if mode == "address":
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0:halt_on_error=1"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    elif mode == "leak":
        env["ASAN_OPTIONS"] = "detect_leaks=1:halt_on_error=1"
    else:
        env["TSAN_OPTIONS"] = "halt_on_error=0:second_deadlock_stack=1:report_signal_unsafe=0"
    start = time.time()
    try:
        proc = subprocess.run(
            [sys.executable, os.path.join(src, "tests", "sanitizers", "stress.py"), "--scale",
             str(scale)], cwd=src, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        return {"mode": mode, "status": "failed", "why": f"stress run exceeded {timeout} s",
                "output_tail": ((err.stdout or b"")[-2000:]).decode(errors="replace")}
    text = proc.stdout + proc.stderr
    reports = count_reports(text, mode)
    finished = "stress workload finished" in proc.stdout
    status = "clean" if reports == 0 and finished else "failed"
    if status == "failed":
        sys.stderr.write(text[-20000:])
    extra = {}
    if mode == "leak":  # leaks outside torchfrag (the interpreter's own), for the record
        extra["leaks_outside_torchfrag"] = len(re.findall(r"(Direct|Indirect) leak of", text)) - reports
    return {"mode": mode, "status": status, "reports": reports, "workload_finished": finished, **extra,
            "exit_code": proc.returncode, "build_s": round(build_s, 1),
            "run_s": round(time.time() - start, 1),
            "families": [line[3:] for line in proc.stdout.splitlines() if line.startswith("ok ")]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", default="address,leak,thread")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--scratch", default=None, help="build folder (default: a temp dir)")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    scratch = args.scratch or tempfile.mkdtemp(prefix="torchfrag-sanitize-")
    built: dict[str, float] = {}
    results = [run_mode(m, scratch, args.scale, built) for m in args.modes.split(",")]
    for r in results:
        print(json.dumps(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all(r["status"] in ("clean", "skipped") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
