"""The baseline's learning-rate grid (hyper_es/compare/grid.py): it grows until its best lr is interior, resumes
from its JSON without scoring an lr again, and names the baseline row (the best candidate at the chosen lr)."""

from hyper_es.compare import grid


def _entry(val: float) -> dict:
    return {"val": val, "candidates": {"base": {"steps": 0, "val": 0.1}, "baseline@3": {"steps": 3, "val": val},
                                       "baseline": {"steps": 9, "val": val - 0.05}}}


def test_the_grid_grows_until_its_best_is_interior_and_resumes_from_its_json(tmp_path):
    curve = {1e-4: 0.2, 2e-4: 0.3, 4e-4: 0.5, 8e-4: 0.6, 1.6e-3: 0.4}
    calls = []

    def score(lr):
        calls.append(lr)
        return _entry(curve[lr])

    out = tmp_path / "seed0" / "lr_grid.json"
    result = grid.tune(out, [1e-4, 2e-4, 4e-4], score, seed=0)
    assert calls == [1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3]  # doubled past the large edge twice, then interior
    assert result["chosen"] == 8e-4 and result["interior"] and list(result["lrs"]) == ["0.0001", "0.0002", "0.0004",
                                                                                         "0.0008", "0.0016"]
    assert result["baseline_best"] == {"name": "baseline@3", "steps": 3, "val": 0.6}
    calls.clear()
    assert grid.tune(out, [5e-4], score, seed=0) == result and calls == []  # its recorded start and lrs stand


def test_a_full_grid_stops_with_its_best_at_an_edge_and_says_so(tmp_path):
    result = grid.tune(tmp_path / "g.json", [1e-4, 2e-4], lambda lr: _entry(lr * 1000), seed=1, max_lrs=3)
    assert result["chosen"] == 4e-4 and not result["interior"] and len(result["lrs"]) == 3
