"""Directions that share a subspace: one LoRA init for every job, and directions from one run's snapshots."""

import json

import torch
from safetensors.torch import load_file

import hyper_es as hx
from hyper_es.directions.collect import collect
from hyper_es.merging import MergePlan, MergeSettings, global_weights

from test_directions import write_recipe  # noqa: E402  (tests/ is on sys.path under pytest)


def _lora_a(run, name):
    sd = load_file(str(run / "directions" / name / "adapter_model.safetensors"))
    return torch.cat([v.flatten() for k, v in sorted(sd.items()) if ".lora_A." in k])


def test_lora_seed_gives_every_job_the_same_init(tmp_path):
    """TRL seeds the LoRA init with the job's seed, so jobs that differ by seed get orthogonal A; lora_seed
    shares one init, and after one small step their A stay nearly parallel."""
    cos = {}
    for shared in (None, 7):
        (tmp_path / str(shared)).mkdir()
        recipe = hx.load_recipe(write_recipe(tmp_path / str(shared), directions=2, steps=1, learning_rate=1e-4,
                                             lora_seed=shared))
        run = tmp_path / f"run-{shared}"
        collect(recipe, run)
        a, b = _lora_a(run, "dir-0"), _lora_a(run, "dir-1")
        cos[shared] = float(a @ b / (a.norm() * b.norm()))
    assert abs(cos[None]) < 0.2 and cos[7] > 0.99


def test_snapshot_directions_add_up_to_the_run(tmp_path):
    """directions_from: snapshots: 3 increments of one run (2 steps each); with all coefficients 1 in a linear
    merge they equal the run's adapter at step 6 exactly (here the baseline's final adapter)."""
    (tmp_path / "r").mkdir()
    recipe = hx.load_recipe(write_recipe(tmp_path / "r", directions=3, steps=2, directions_from="snapshots",
                                         baseline_steps=6))
    run = tmp_path / "run"
    folders = collect(recipe, run)
    assert [f.name for f in folders] == ["dir-0", "dir-1", "dir-2"]
    m = json.loads((run / "directions/dir-1/manifest.json").read_text())
    assert m["optimizer_steps"] == 2 and m["derived_from"] == {"run": "baseline", "steps": [2, 4]}
    assert [s for s, _ in m["reward_curve"]] == [3, 4] and m["tokens"] > 0
    cfg = json.loads((run / "directions/dir-1/adapter_config.json").read_text())
    assert cfg["r"] == 8  # rank 2r: [B_4, -B_2] [A_4; A_2]
    ds = hx.DirectionSet.from_run(run)
    assert ds.names == ["dir-0", "dir-1", "dir-2"]
    whole = hx.DirectionSet.from_adapters(ds.base, [run / "directions" / "baseline"])
    genome, x = global_weights(ds, dict.fromkeys(ds.names, 1.0))
    merged = MergePlan(ds, genome, MergeSettings(method="task_arithmetic"))
    for t, delta in merged.deltas(x):
        torch.testing.assert_close(delta, whole.delta(0, t), rtol=0, atol=1e-6)
    again = collect(recipe, run)  # resumes: nothing retrained or rewritten
    assert again == folders
    from hyper_es.evaluate.final import plan_rows

    rows = [r.name for r in plan_rows(run, ds.names, {})]  # increments alone are not evaluated as models
    assert rows == ["base", "uniform", "baseline"]
    # the report charges uniform and Hyper-ES rows the increments' steps (6), though no increment is a row
    from hyper_es.report import run_report

    fake = [{"name": n, "kind": n, "steps": s, "results": {}} for n, s in (("base", 0), ("uniform", None))]
    report = run_report(recipe, run, fake)
    assert [r["optimizer_steps"] for r in report["rows"]] == [0, 6]
