"""A run folder's own recipe: one written before `partition` existed keeps its per-seed splits on resume."""

import json

import pytest
import yaml

import hyper_es as hx
from hyper_es.errors import HyperESError
from recipes import tiny_data


def test_a_run_folder_from_before_partitions_keeps_its_splits(tmp_path):
    """A run's recipe.yaml without `partition` is from before it existed: its generated splits were per-seed streams.
    Resuming it with today's default (question) is refused as a change of tasks; pinning partition: none resumes."""
    from hyper_es.directions.collect import prepare_run_dir
    from hyper_es.recipe import load_run_recipe

    data = tiny_data(base="dense")
    del data["tasks"][0]["train"]["partition"]
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    new = hx.load_recipe(path)  # today's default: partition question
    assert new.tasks[0].train.partition == "question"
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text(yaml.safe_dump(data))  # as an old run folder has it
    assert load_run_recipe(run).tasks[0].train.partition == "none"
    with pytest.raises(HyperESError, match="tasks differ"):
        prepare_run_dir(new, run)
    prepare_run_dir(hx.load_recipe(write_pinned(tmp_path, data)), run)  # partition: none pinned: resumes
    assert yaml.safe_load((run / "recipe.yaml").read_text())["tasks"][0]["train"]["partition"] == "none"


def write_pinned(folder, data):
    pinned = json.loads(json.dumps(data))
    pinned["tasks"][0]["train"]["partition"] = "none"
    path = folder / "pinned.yaml"
    path.write_text(yaml.safe_dump(pinned))
    return path
