"""The same tiny search and ES run give the values the code before the engine/fitness/loop refactor recorded
(tests/golden/record.py at df77084): generation logs and result rows (floats within 1e-9 relative: pycma rounds
differently on another CPU), and the final updates bitwise; and a run folder that code left half-finished (one
search generation, one ES iteration) resumes to the same values. The updates' norms (`*_stats`) were added later
from today's code, where its digests equalled the recorded ones."""

import json
import shutil
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
sys.path.insert(0, str(GOLDEN))
import record  # noqa: E402

WANT = json.loads((GOLDEN / "golden.json").read_text())


def _row_update():
    from hyper_es.rows import row_update

    return row_update


def _check(recipe, run):
    record.check(record.observed(recipe, run, _row_update()), WANT)


def test_search_and_es_give_the_recorded_values(tmp_path):
    from hyper_es.directions.collect import collect
    from hyper_es.search.es_run import run_es
    from hyper_es.search.run import search

    recipe = record.recipe(tmp_path)
    collect(recipe, tmp_path / "run")
    search(recipe, tmp_path / "run", backend="hf")
    run_es(recipe, tmp_path / "run", backend="hf")
    _check(recipe, tmp_path / "run")


def test_a_run_folder_of_the_old_code_resumes_to_the_recorded_values(tmp_path):
    from hyper_es.search.es_run import run_es
    from hyper_es.search.run import search

    recipe = record.recipe(tmp_path)
    shutil.copytree(GOLDEN / "old_run", tmp_path / "run")
    assert len((tmp_path / "run/search/generations.jsonl").read_text().splitlines()) == 1
    assert len((tmp_path / "run/es/history.jsonl").read_text().splitlines()) == 1
    search(recipe, tmp_path / "run", backend="hf")
    run_es(recipe, tmp_path / "run", backend="hf")
    _check(recipe, tmp_path / "run")


@pytest.mark.parametrize("key", ["search_update", "es_update"])
def test_the_recorded_updates_are_not_trivial(key):
    """What the checks above compare against moves the model: a recorded update of zeros (digest and norms) fails
    here, since a run whose update is lost would then match it."""
    norms = WANT[f"{key}_stats"]
    assert len(WANT[key]) == 64 and norms["l1"] > 1 and norms["l2"] > 0.1
    assert WANT["es_result"]["kept_iterations"] == 3 and len(WANT["search"]) == 3
    assert any(abs(v - 1 / 2) > 1e-6 for v in WANT["best"]["values"].values())  # not the search's start (1/K each)
