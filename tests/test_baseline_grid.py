"""The baseline's learning-rate grid (bench/baseline_grid.py) grows until its best learning rate is interior."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import baseline_grid as bg  # noqa: E402

from hyper_es.compare import grid  # noqa: E402
from hyper_es.compare.equal import equal_plan  # noqa: E402


def test_the_grid_grows_past_an_edge_best_and_stops_when_interior_or_full():
    assert grid.next_lr({1e-4: 0.5, 2e-4: 0.4, 4e-4: 0.3}, 6) == 5e-5  # best at the small edge: halve it
    assert grid.next_lr({1e-4: 0.3, 2e-4: 0.4, 4e-4: 0.5}, 6) == 8e-4  # best at the large edge: double it
    assert grid.next_lr({1e-4: 0.3, 2e-4: 0.5, 4e-4: 0.4}, 6) is None  # interior
    assert grid.next_lr({1e-4: 0.5, 2e-4: 0.4, 4e-4: 0.3}, 3) is None  # full
    assert grid.next_lr({1e-4: 0.4, 2e-4: 0.4, 4e-4: 0.3}, 6) == 5e-5  # a tie goes to the smaller lr


def test_an_lr_scores_its_best_trained_adapter_and_the_base_is_not_one():
    vals = [{"name": "base", "steps": 0, "val": {"mean": 0.9}}, {"name": "baseline@3", "steps": 3, "val": {"mean": 0.4}},
            {"name": "baseline@6", "steps": 6, "val": {"mean": 0.4}}, {"name": "baseline", "steps": 9, "val": {"mean": 0.2}}]
    assert grid.best_trained(vals)["name"] == "baseline@3"  # ties: fewer steps


def test_decide_links_the_shared_rows_and_plans_equal_compute(tmp_path):
    import json
    import os

    import decide

    main = tmp_path / "seed0-lr0.0005"
    (main / "directions" / "baseline").mkdir(parents=True)
    (main / "eval" / "val").mkdir(parents=True)
    (main / "directions" / "baseline" / "manifest.json").write_text(json.dumps({
        "name": "baseline", "job": {}, "base": {"name": "m", "sha256": "0"}, "optimizer_steps": 27, "completions": 432,
        "tokens": 2700, "reward_curve": [], "wall_seconds": 54.0}))
    for name in ("base", "baseline", "baseline@3", "scaled", "hyper-es", "uniform"):
        (main / "eval" / f"{name}.json").write_text("{}")
    (main / "eval" / "val" / "scaled@0.5.json").write_text("{}")
    (main / "report.json").write_text(json.dumps({"rows": [{"name": "hyper-es", "tokens": 90_000, "wall_s": 300.0}]}))
    f = decide.folders(tmp_path, 0, 5e-4)
    assert f["main"] == main and f["difficulty"].name == "seed0-lr0.0005-difficulty"
    decide.link_shared(main, f["difficulty"], baseline=True)
    linked = sorted(p.name for p in (f["difficulty"] / "eval").glob("*.json"))
    assert linked == ["base.json", "baseline.json", "baseline@3.json", "scaled.json"]  # not hyper-es, not uniform
    assert os.path.samefile(f["difficulty"] / "directions/baseline/manifest.json",
                            main / "directions/baseline/manifest.json")
    assert (f["difficulty"] / "eval/val/scaled@0.5.json").is_file()
    plan = equal_plan(main, 3)  # 90,000 tokens at 100 per step: 900 batches; 300 s at 2 s per step: 150
    assert plan == {"budget": "tokens", "budget_tokens": 90_000, "budget_s": 300.0, "baseline_tokens_per_step": 100.0,
                    "baseline_s_per_step": 2.0, "steps": 27, "accumulation": 34, "batches": 918, "snapshot_every": 3,
                    "equal_steps": 900, "equal_wall_steps": 150, "capped": False,  # rounded up: at least the budget
                    "micro": 1}  # a manifest without its gradient settings: one micro-batch a batch
    assert equal_plan(main, 3, 450) == {**plan, "accumulation": 17, "batches": 459, "capped": True}
    assert equal_plan(main, 3, budget="seconds") == {**plan, "budget": "seconds", "accumulation": 6,
                                                     "batches": 162, "capped": True}


def test_restore_takes_back_the_search_only_when_the_retrained_jobs_match(tmp_path):
    import json

    import decide

    job = {"name": "baseline", "job": {}, "base": {"name": "m", "sha256": "0"}, "optimizer_steps": 27,
           "completions": 432, "tokens": 2700, "seen_tokens": 9000, "token_curve": [[27, 2700]],
           "reward_curve": [[27, 0.25]], "wall_seconds": 1.0}
    saved, run = tmp_path / "saved", tmp_path / "run"
    for folder, wall in ((saved, 1.0), (run, 2.0)):  # the wall time may differ; the training may not
        (folder / "directions" / "baseline").mkdir(parents=True)
        (folder / "directions" / "baseline" / "manifest.json").write_text(json.dumps({**job, "wall_seconds": wall}))
    (saved / "search").mkdir()
    (saved / "search" / "checkpoint.json").write_text("{}")
    (saved / "eval" / "val").mkdir(parents=True)
    (saved / "eval" / "val" / "base.json").write_text("{}")
    (saved / "report.json").write_text("{}")
    assert decide.restore(saved, run)
    assert (run / "search" / "checkpoint.json").is_file() and (run / "eval" / "val" / "base.json").is_file()
    assert not (run / "report.json").exists()  # written again by the stage, not taken back
    other = tmp_path / "other"
    (other / "directions" / "baseline").mkdir(parents=True)
    (other / "directions" / "baseline" / "manifest.json").write_text(json.dumps({**job, "reward_curve": [[27, 0.5]]}))
    assert not decide.restore(saved, other) and not (other / "search").exists()


def test_the_base_row_is_shared_across_seeds_only_when_model_tasks_and_evaluation_match(tmp_path):
    """A seed re-seeds training and the search, not the base row: another seed's committed base row is taken when
    the model, tasks and evaluation settings (but for which rows are tested) are equal, and never otherwise."""
    import yaml

    import decide

    recipe = {"name": "r-seed0", "model": {"name": "m"}, "tasks": [{"name": "t"}], "gradient": {"seed": 0},
              "eval": {"seed": 0, "k": [1, 8], "snapshots": "all"}}
    saved = tmp_path / "results" / "seed0" / "main"
    (saved / "eval").mkdir(parents=True)
    (saved / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    (saved / "eval" / "base.json").write_text('{"name": "base"}')
    run = tmp_path / "seed1"
    run.mkdir()
    mine = {**recipe, "name": "r-seed1", "gradient": {"seed": 1},
            "eval": {**recipe["eval"], "snapshots": "best", "pass_k_tasks": ["t"]}}
    (run / "recipe.yaml").write_text(yaml.safe_dump(mine))
    assert decide.share_base(tmp_path / "results", run)
    assert (run / "eval" / "base.json").read_text() == '{"name": "base"}'
    assert not decide.share_base(tmp_path / "results", run)  # already there: kept
    for changed in ({"eval": {**mine["eval"], "seed": 1}}, {"tasks": [{"name": "t", "max_tokens": 8}]}):
        other = tmp_path / f"other{len(list(tmp_path.iterdir()))}"
        other.mkdir()
        (other / "recipe.yaml").write_text(yaml.safe_dump({**mine, **changed}))
        assert not decide.share_base(tmp_path / "results", other) and not (other / "eval").exists()


def test_decide_coevolve_arms_render_the_generic_genes_and_name_their_stages(tmp_path):
    """The co-evolution stage's recipes validate, every gene renders (braces of \\boxed{} kept), and each arm's folder
    is copied to its own stage under the results."""
    import decide

    from hyper_es import models
    from hyper_es.tasks import Task
    from hyper_es.tasks.prompt_genome import Prompt, PromptGenome

    path = Path(__file__).resolve().parents[1] / "recipes/smollm2-135m.yaml"
    tasks = decide.load_recipe_tasks(path)
    assert tasks == ["chain_sum", "add_sub"]
    recipe = bg.variant(path, lr=5e-4, seed=1, overrides={"coevolve": {
        "tasks": {t: decide.COEVOLVE_GENES for t in tasks}, "weights": "fixed"}})
    assert recipe.coevolve.weights == "fixed" and recipe.eval.pass_k_tasks == tasks
    task = Task(recipe.task("chain_sum"), recipe.base_dir)
    genome = PromptGenome(task, recipe.coevolve.tasks["chain_sum"])
    tok = models.load("tiny-random")[1]
    row = task.rows("test")[0]
    text = genome.task(Prompt(system=2, template=1, format=1, shots=(0,))).prompt_text(tok, row)
    assert "careful problem solver" in text and "Think step by step" in text and "\\boxed{}" in text
    assert "Reply with the final answer only." in text and row["question"] in text
    main = tmp_path / "seed1-lr6.25e-05"
    assert decide.stage_name(main, main) == "main"
    assert decide.stage_name(main, tmp_path / "seed1-lr6.25e-05-coevolve-prompt") == "coevolve-prompt"


def test_the_equal_compute_run_plans_from_the_committed_main_run_and_checkpoints_often(tmp_path):
    """--train-only can start grpo-equal-compute before the main run is rebuilt on this machine: the plan comes from
    the committed report and manifest; the baseline's steps and snapshots, more batches a step, a checkpoint a step."""
    import json
    from types import SimpleNamespace

    import decide

    saved = tmp_path / "results" / "seed0" / "main"
    (saved / "directions" / "baseline").mkdir(parents=True)
    (saved / "directions" / "baseline" / "manifest.json").write_text(json.dumps({
        "name": "baseline", "job": {}, "base": {"name": "m", "sha256": "0"}, "optimizer_steps": 27, "completions": 432,
        "tokens": 2700, "reward_curve": [], "wall_seconds": 54.0}))
    (saved / "report.json").write_text(json.dumps({"rows": [{"name": "hyper-es", "tokens": 90_000, "wall_s": 300.0}]}))
    rebuilt = tmp_path / "root" / "seed0-lr0.0005"  # retrained here beside another run: not the measured costs
    (rebuilt / "directions" / "baseline").mkdir(parents=True)
    (rebuilt / "report.json").write_text(json.dumps({"rows": [{"name": "hyper-es", "tokens": 1, "wall_s": 1.0}]}))
    args = SimpleNamespace(recipe=Path(__file__).resolve().parents[1] / "recipes/smollm2-135m.yaml",
                           root=tmp_path / "root", results=tmp_path / "results", pass_k_limit=200,
                           equal_max_batches=None, equal_budget="tokens")
    recipe, folder = decide.equal_recipe(args, 0, 5e-4)
    assert folder == tmp_path / "root" / "seed0-lr0.0005-equal"
    assert json.loads((folder / "equal_compute.json").read_text())["batches"] == 918  # 90,000 tokens at 100 a batch
    g = recipe.gradient
    assert (g.baseline_steps, g.accumulation_steps, g.baseline_snapshot_every, g.checkpoint_every) == (27, 34, 3, 1)
    assert (g.learning_rate, g.seed, recipe.fitness.seed) == (5e-4, 0, 0)
