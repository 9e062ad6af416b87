"""A finished CLI run's learning curve as a result file: JSON (curve, overrides) and PNG.

Long learning runs (CarRacing's pixel PPO takes most of an hour on two shared cores) are not
repeated by a benchmark script: the run is made with ``python -m torchfrag.train ...`` and
recorded here from its run directory, with the command that made it.

Usage::

    python -m benchmarks.run_curve RUN_DIR --name learning_car_racing \
        --title "PPO CarRacing-v3 (pixels), seed 0" --note "stopped at 100k actions"
"""
from __future__ import annotations

import argparse
import csv
import os
import time
from typing import Any

from benchmarks._common import RESULTS_DIR, write_json
from torchfrag.train_plot import save_learning_curve


def read_run(run_dir: str) -> dict[str, Any]:
    """The training-return curve and the Hydra overrides of a CLI run directory."""
    path = os.path.join(run_dir, "train", "scalars", "train", "episode_return.csv")
    with open(path) as f:
        curve = [(int(float(x)), float(y)) for x, y in csv.reader(f)]
    overrides_path = os.path.join(run_dir, ".hydra", "overrides.yaml")
    overrides = []
    if os.path.exists(overrides_path):
        with open(overrides_path) as f:
            overrides = [line[2:].strip() for line in f if line.startswith("- ")]
    return {"curve": curve, "overrides": overrides,
            "finished_at": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(os.path.getmtime(path)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--name", required=True, help="result file stem in benchmarks/results")
    parser.add_argument("--title", required=True)
    parser.add_argument("--note", default="", help="what the curve alone does not say (load, stop, evaluation)")
    args = parser.parse_args()
    run = read_run(args.run_dir)
    payload = {"command": "python -m torchfrag.train " + " ".join(run["overrides"]), "title": args.title,
               "note": args.note, **run}
    path = write_json(args.name, payload)
    save_learning_curve(run["curve"], [], os.path.join(RESULTS_DIR, f"{args.name}.png"), args.title)
    print(f"wrote {path} and {args.name}.png")


if __name__ == "__main__":
    main()
