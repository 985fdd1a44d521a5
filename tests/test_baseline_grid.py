"""The baseline's learning-rate grid (bench/baseline_grid.py) grows until its best learning rate is interior."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import baseline_grid as bg  # noqa: E402


def test_the_grid_grows_past_an_edge_best_and_stops_when_interior_or_full():
    assert bg.next_lr({1e-4: 0.5, 2e-4: 0.4, 4e-4: 0.3}, 6) == 5e-5  # best at the small edge: halve it
    assert bg.next_lr({1e-4: 0.3, 2e-4: 0.4, 4e-4: 0.5}, 6) == 8e-4  # best at the large edge: double it
    assert bg.next_lr({1e-4: 0.3, 2e-4: 0.5, 4e-4: 0.4}, 6) is None  # interior
    assert bg.next_lr({1e-4: 0.5, 2e-4: 0.4, 4e-4: 0.3}, 3) is None  # full
    assert bg.next_lr({1e-4: 0.4, 2e-4: 0.4, 4e-4: 0.3}, 6) == 5e-5  # a tie goes to the smaller lr


def test_an_lr_scores_its_best_trained_adapter_and_the_base_is_not_one():
    vals = [{"name": "base", "steps": 0, "val": {"mean": 0.9}}, {"name": "baseline@3", "steps": 3, "val": {"mean": 0.4}},
            {"name": "baseline@6", "steps": 6, "val": {"mean": 0.4}}, {"name": "baseline", "steps": 9, "val": {"mean": 0.2}}]
    assert bg.best_trained(vals)["name"] == "baseline@3"  # ties: fewer steps
