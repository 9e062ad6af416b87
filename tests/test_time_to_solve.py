"""benchmarks/time_to_solve.py: following a training process's returns and stopping it at the target."""
from __future__ import annotations

import os
import sys

from benchmarks.time_to_solve import RunWatch, merge, summarize

FAKE = ("import sys, time\n"
        "for i in range({n}):\n"
        "    print(f'global_step={{100 * (i + 1)}}, episodic_return=[{{float(i)}}]', flush=True)\n"
        "    time.sleep(0.01)\n"
        "time.sleep({hang})\n")


def _watch(n: int, target: float, hang: float = 0.0, max_seconds: float = 60.0) -> dict:
    code = FAKE.format(n=n, hang=hang)
    return RunWatch([sys.executable, "-c", code], os.getcwd(), target=target, window=4,
                    max_seconds=max_seconds).run(dict(os.environ))


def test_stops_the_process_once_the_window_mean_reaches_the_target():
    rec = _watch(n=1000, target=20.0, hang=600)
    assert rec["stopped"] == "target"
    # mean of returns 19, 20, 21, 22 = 20.5 is the first window >= 20 (the 23rd line, step 2300)
    assert rec["frames_to_target"] == 2300 and rec["seconds_to_target"] < 60
    assert rec["wall_seconds"] < 60  # the hanging process was killed, not waited for


def test_a_run_that_never_reaches_the_target_is_reported_so():
    rec = _watch(n=10, target=1e9)
    assert rec["stopped"] == "exited" and rec["seconds_to_target"] is None
    assert rec["last_step"] == 1000 and len(rec["curve"]) == 10


def test_time_limit_and_merge(tmp_path):
    rec = _watch(n=5, target=1e9, hang=600, max_seconds=2.0)
    assert rec["stopped"] == "time limit" and rec["wall_seconds"] < 30
    import json

    parts = []
    for k, system in enumerate(["torchfrag", "cleanrl"]):
        r = {**rec, "seconds_to_target": 10.0 * (k + 1), "fps": 100.0, "seed": 0}
        path = tmp_path / f"p{k}.json"
        path.write_text(json.dumps({"records": {"t": {system: [r]}}, "versions": {}, "notes": [],
                                    "tasks": {"t": {"env": "E", "target": 1.0}}, "seeds": [0],
                                    "window": 4, "max_seconds": 2.0}))
        parts.append(str(path))
    rows, _ = summarize(merge(parts))
    assert rows[1][1] == "cleanrl" and rows[1][-1] == "0.50x"


def test_unsolved_runs_bound_the_median_instead_of_vanishing():
    """A seed that never solved is not dropped: peers' medians become lower bounds, ours an upper one."""
    def rec(sec, wall):
        return {"seconds_to_target": sec, "wall_seconds": wall, "fps": 1.0, "curve": []}

    result = {"records": {"t": {
        "torchfrag": [rec(100.0, 100.0), rec(None, 900.0), rec(200.0, 200.0)],   # median 200 (900 < t)
        "cleanrl": [rec(None, 600.0), rec(None, 600.0), rec(300.0, 300.0)],      # median >= 600
        "torchrl": [rec(400.0, 400.0), rec(500.0, 500.0), rec(450.0, 450.0)],    # median 450 exactly
    }}}
    rows, _ = summarize(result)
    by = {r[1]: r for r in rows}
    assert by["torchfrag"][2] == "200.0" and by["torchfrag"][3] == "2/3"
    assert by["cleanrl"][2] == ">= 600.0" and by["cleanrl"][-1] == "<= 0.33x"
    assert by["torchrl"][2] == "450.0" and by["torchrl"][-1] == "0.44x"
    # an unsolved seed that stopped early leaves our median open: an upper bound, and so is the ratio
    result["records"]["t"]["torchfrag"][1] = rec(None, 150.0)
    rows, _ = summarize(result)
    assert rows[0][2] == "<= 200.0" and rows[2][-1] == "<= 0.44x"
    # the lucky seeds alone would have claimed a 150 s median and 0.33x against torchrl
    result["records"]["t"]["torchfrag"] = [rec(None, 900.0), rec(None, 900.0), rec(100.0, 100.0)]
    rows, _ = summarize(result)
    assert rows[0][2] == "not reached" and rows[2][-1] == "-"
