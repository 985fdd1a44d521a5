"""A run folder is data: a damaged file gives exit 2 and one line naming it and what to do, never a traceback.

One finished tiny run (2 directions of 1 step, a 1-generation HF search) is built once; each case copies it,
damages one file and runs the real CLI on the copy.
"""

import shutil
from pathlib import Path

import pytest

import hyper_es as hx
from hyper_es.errors import DataError
from hyper_es.search.driver import CHECKPOINT
from recipes import tiny_recipe

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from hyper_es.directions.collect import collect
    from hyper_es.search.run import search

    folder = tmp_path_factory.mktemp("finished")
    recipe = tiny_recipe(folder, {"tasks.0.test.limit": 4, "gradient": {"directions": 2, "steps": 1},
                                  "search": {"popsize": 2, "max_generations": 1},
                                  "fitness": {"minibatch": 2, "val_size": 2, "rescore_top": 1}})
    run = folder / "run"
    collect(recipe, run)
    search(recipe, run, backend="hf")
    assert (run / "search" / "best.json").is_file() and (run / "search" / CHECKPOINT).is_file()
    return run


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00\x9f garbage {]")


def _export(run: Path) -> list[str]:
    return ["export", str(run), "--format", "mergekit", "--out", str(run.parent / "merge.yaml")]


def _search(run: Path) -> list[str]:
    return ["search", str(run / "recipe.yaml"), "--out", str(run), "--backend", "hf"]


@pytest.mark.parametrize("file,damage,command", [
    ("directions/dir-0/manifest.json", _garbage, _export),
    ("directions/dir-0/adapter_model.safetensors", _truncate, _export),
    ("directions/dir-1/adapter_config.json", _garbage, _export),
    (f"search/{CHECKPOINT}", _truncate, _search),
    ("search/best.json", _garbage, _export),
], ids=["manifest", "adapter-weights", "adapter-config", "checkpoint", "best"])
def test_damaged_file_gives_one_line_naming_it(cli, finished_run, tmp_path, file, damage, command):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    damage(run / file)
    proc = cli(*command(run))
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert proc.exit_code == 2, proc.stderr[-3000:]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert str(run / file) in errors[0]
    assert "delete" in errors[0] or "re-run" in errors[0]  # says what to do


def test_damaged_report_inputs_name_the_file(finished_run, tmp_path):
    """search/result.json, the generation log and an eval row, read back by the report and the final evaluation."""
    from hyper_es.evaluate.final import read_row
    from hyper_es.report import run_report

    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    recipe = hx.load_recipe(run / "recipe.yaml")
    _truncate(run / "search" / "result.json")
    with pytest.raises(DataError, match=rf"^{run / 'search/result.json'}: damaged or not JSON .*; delete it"):
        run_report(recipe, run, [])
    (run / "search" / "result.json").unlink()
    with (run / "search" / "generations.jsonl").open("a") as f:
        f.write('{"generation": 1, "be')
    with pytest.raises(DataError, match=rf"^{run / 'search/generations.jsonl'}:2: not a JSON record"):
        run_report(recipe, run, [])
    (run / "eval").mkdir()
    (run / "eval" / "base.json").write_text('{"name": "base"}')
    with pytest.raises(DataError, match=r"base.json: not an evaluation row .*; delete it to evaluate this row again"):
        read_row(run / "eval" / "base.json")


def test_run_recipe_damaged_or_from_before_a_new_field(finished_run, tmp_path):
    """RUN/recipe.yaml guards resuming with another recipe: damaged, it names itself; written before a field was
    added (here: tasks[].prompt.truncate), it still counts as the same recipe."""
    import yaml

    from hyper_es.directions.collect import prepare_run_dir

    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    recipe = hx.load_recipe(run / "recipe.yaml")
    old = yaml.safe_load((run / "recipe.yaml").read_text())
    del old["tasks"][0]["prompt"]["truncate"]
    (run / "recipe.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    prepare_run_dir(recipe, run)
    assert "truncate: false" in (run / "recipe.yaml").read_text()
    (run / "recipe.yaml").write_bytes(b"model: [unclosed\n")
    with pytest.raises(DataError, match=rf"^{run / 'recipe.yaml'}: damaged, not a recipe .*; restore it, or delete"):
        prepare_run_dir(recipe, run)
