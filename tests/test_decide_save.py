"""`bench/decide.py --save`: a running stage's state goes to the results; a finished stage's committed record is
never overwritten by a stage rebuilt on another machine to build on (its retrain times would replace the measured
ones)."""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import decide  # noqa: E402


def test_save_copies_running_stages_and_keeps_finished_ones(tmp_path):
    root, results = tmp_path / "root", tmp_path / "results"
    (root / "seed0").mkdir(parents=True)
    (root / "seed0" / "lr_grid.json").write_text(json.dumps({"seed": 0, "chosen": 5e-4, "lrs": {}}))
    main = decide.folders(root, 0, 5e-4)["main"]
    for folder, wall in ((main, 2.0), (main.with_name(main.name + "-difficulty"), 3.0)):
        (folder / "search").mkdir(parents=True)
        (folder / "report.json").write_text(json.dumps({"wall": wall}))
        (folder / "search" / "checkpoint.json").write_text("{}")
    (results / "seed0" / "main").mkdir(parents=True)
    (results / "seed0" / "main" / "report.json").write_text(json.dumps({"wall": 1.0}))  # measured elsewhere
    decide.save(argparse.Namespace(root=root, results=results, seeds=[0]))
    assert json.loads((results / "seed0" / "main" / "report.json").read_text()) == {"wall": 1.0}
    assert not (results / "seed0" / "main" / "search").exists()
    assert json.loads((results / "seed0" / "difficulty" / "report.json").read_text()) == {"wall": 3.0}
    assert (results / "seed0" / "difficulty" / "search" / "checkpoint.json").is_file()
    assert json.loads((results / "seed0" / "lr_grid.json").read_text())["chosen"] == 5e-4


def test_a_stage_with_its_own_baseline_shares_only_the_base_records(tmp_path):
    """grpo-equal-compute trains its own baseline under the same row names (baseline, baseline@N): the main run's
    records of those rows are other weights and must not be linked in; the difficulty stage shares them all."""
    main, equal, difficulty = tmp_path / "main", tmp_path / "equal", tmp_path / "difficulty"
    for sub in ("eval", "eval/val"):
        (main / sub).mkdir(parents=True)
        for name in ("base", "baseline", "baseline@3", "scaled", "scaled@0.5"):
            (main / sub / f"{name}.json").write_text("{}")
    (main / "directions" / "baseline").mkdir(parents=True)
    (main / "directions" / "baseline" / "manifest.json").write_text("{}")
    decide.link_shared(main, equal, baseline=False, rows=("base",))
    assert sorted(p.name for p in (equal / "eval").rglob("*.json")) == ["base.json", "base.json"]
    assert not (equal / "directions").exists()
    decide.link_shared(main, difficulty, baseline=True)
    assert len(list((difficulty / "eval").rglob("*.json"))) == 10
    assert (difficulty / "directions" / "baseline" / "manifest.json").is_file()
