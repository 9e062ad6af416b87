"""The ASan+UBSan pass, run by CI: build with sanitizers, run the pool stress workload.

The full pass (ASan+UBSan, LeakSanitizer and ThreadSanitizer at full scale) is
``python tests/sanitizers/run.py``; its last result is in the README.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_address_and_undefined_behaviour_sanitizers(tmp_path) -> None:
    sys.path.insert(0, os.path.join(HERE, "sanitizers"))
    from run import runtime_library

    if runtime_library("libasan.so") is None:
        pytest.skip("the compiler has no AddressSanitizer runtime")
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "sanitizers", "run.py"), "--modes", "address",
         "--scale", "0.25", "--scratch", str(tmp_path / "build"), "--json", str(out)],
        capture_output=True, text=True, timeout=1500)
    assert out.exists(), proc.stderr[-5000:]
    (result,) = json.loads(out.read_text())
    assert result["status"] == "clean", (result, proc.stderr[-5000:])
    assert result["reports"] == 0 and result["workload_finished"]
    assert {"CartPole-v1", "Pendulum-v1", "Debug-v0"} <= set(result["families"])
