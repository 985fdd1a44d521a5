"""The horizon study's tables (bench/horizon.py) from comparison summaries: each method against GRPO-LoRA at equal
tokens per horizon, and that gap's change from the shortest horizon with its CI."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import horizon  # noqa: E402


def _summary(folder: Path, gaps: dict[str, tuple[float, float, float]]) -> None:
    from hyper_es.compare.plan import write_plan
    from hyper_es.compare.run import plan_for

    folder.mkdir(parents=True)
    write_plan(folder, plan_for(horizon.horizon_recipe(ROOT / "recipes" / "smollm2-135m-guess.yaml", 1)))
    pooled = {f"{m} - grpo-equal-compute": {"trained": {"diff": d, "low": lo, "high": hi}}
              for m, (d, lo, hi) in gaps.items()}
    (folder / "summary.json").write_text(json.dumps({"pooled": pooled, "seeds": {}}))


def test_the_gap_to_grpo_and_its_change_with_the_horizon(tmp_path):
    _summary(tmp_path / "h1", {"es": (-0.02, -0.06, 0.02), "hyper-es": (0.0, -0.03, 0.03)})
    _summary(tmp_path / "h4", {"es": (0.05, 0.02, 0.08)})  # hyper-es not summarised at horizon 4 yet
    out, text = horizon.trend(horizon.studied(tmp_path, [1, 2, 4]))
    assert set(out) == {"es", "hyper-es"} and set(out["es"]) == {1, 4} and set(out["hyper-es"]) == {1}
    four = out["es"][4]
    assert four["change"] == pytest.approx(0.07)
    half = (0.03 ** 2 + 0.04 ** 2) ** 0.5  # the two CIs' half-widths (0.03 at horizon 4, 0.04 at 1) as normal: 0.05
    assert (four["change_low"], four["change_high"]) == pytest.approx((0.07 - half, 0.07 + half))
    assert "| es | 1 | -2.0 | [-6.0, +2.0] | (reference) |  |" in text
    assert "| es | 4 | +5.0 | [+2.0, +8.0] | +7.0 | [+2.0, +12.0] |" in text
    assert "| 2 | (not run) | | | | | |" in horizon.table(horizon.studied(tmp_path, [1, 2, 4]), [1, 2, 4])[1]  # h2 has no summary yet
