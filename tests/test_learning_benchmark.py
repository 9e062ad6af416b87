"""The learning benchmark's command line refuses bad overrides before anything trains."""
from __future__ import annotations

import pytest

from benchmarks import learning


@pytest.mark.parametrize("item", ["obs_norm", "=true", " =1"])
def test_set_needs_key_equals_value(item: str) -> None:
    with pytest.raises(ValueError, match="KEY=VALUE"):
        learning.parse_overrides([item])


def test_set_of_an_unknown_field_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        learning.main(["--task", "ppo-hopper", "--seeds", "0", "--set", "obs_nrm=true"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "no field 'obs_nrm'" in err and "obs_norm" in err


def test_overrides_reach_the_config_and_name_the_results() -> None:
    cfg = learning._algo_config(learning.TASKS["ppo-hopper"], 1000, {"obs_norm": False})
    assert cfg["obs_norm"] is False and cfg["total_frames"] == 1000
    assert learning.summarize("ppo-hopper[obs_norm=False]", [
        {"seed": 0, "frames": 10, "seconds": 1.0, "fps": 10.0, "curve": [(10, 5.0)],
         "final_return": 5.0, "completed": True}], 10, {"obs_norm": False})["env"] == "Hopper-v5"
