"""One error boundary: for every verb, a bad model, a bad adapter, an unknown job and a reward that cannot be
imported each print one line (`error: ...`) and exit 2, with no traceback."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import hyper_es as hx
from hyper_es.cli import app

ROOT = Path(__file__).resolve().parents[1]
VERBS = ("check", "collect", "run", "search", "export", "eval")
CASES = ("model", "adapter", "job", "reward")
FIELDS = {"job": {"learning_rate": 1e-4, "seed": 0, "shard": None, "num_shards": 1}, "completions": 8, "tokens": 64, "reward_curve": [], "wall_seconds": 1.0}  # a manifest's other fields


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a missing hub id fails at once instead of trying the network


def _recipe(tmp_path: Path, case: str) -> Path:
    data = hx.load_recipe(ROOT / "recipes/tiny.yaml").model_dump(mode="json")
    for split in ("train", "val", "test"):  # relative data paths stay valid from tmp_path
        src = data["tasks"][0][split]
        if src and src.get("source") == "file":
            src["path"] = str(ROOT / "recipes" / src["path"])
    if case == "model":
        data["model"]["name"] = "no-such-org/no-such-model"
    elif case == "job":
        data["gradient"]["jobs"] = [{"name": "baseline"}]
    elif case == "reward":
        data["tasks"][0]["reward"] = "no_such_module_xyz:score"
    path = tmp_path / f"{case}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run_folder(tmp_path: Path, case: str) -> Path:
    """A run folder damaged for `case`: directions on a missing base, an adapter folder without its weights,
    no finished directions at all, or a resolved recipe naming a reward that cannot be imported."""
    run = tmp_path / f"run-{case}"
    (run / "directions").mkdir(parents=True)
    if case in ("model", "adapter"):
        d = run / "directions" / "dir-0"
        d.mkdir()
        base = "no-such-org/no-such-model" if case == "model" else "tiny-random"
        (d / "manifest.json").write_text(json.dumps({"name": "dir-0", "optimizer_steps": 2, **FIELDS,
                                                   "base": {"name": base, "sha256": "0" * 64}}))
        (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8}))
    recipe = _recipe(tmp_path, "reward" if case == "reward" else "ok")
    (run / "recipe.yaml").write_text(recipe.read_text())
    return run


def _args(verb: str, case: str, tmp_path: Path) -> list[str]:
    out = ["--out", str(tmp_path / "out")]
    if verb == "check":
        return ["check", str(_recipe(tmp_path, case if case != "adapter" else "model"))]
    if verb in ("collect", "run"):
        if case == "adapter":  # a resumed run folder whose finished direction lost its adapter weights
            return [verb, str(_recipe(tmp_path, "ok")), "--out", str(_run_folder(tmp_path, "adapter"))]
        return [verb, str(_recipe(tmp_path, case)), *out]
    if verb == "search":
        if case in ("adapter", "job"):
            folder = _run_folder(tmp_path, "adapter" if case == "adapter" else "empty")
            return ["search", str(_recipe(tmp_path, "ok")), "--out", str(folder), "--backend", "hf"]
        return ["search", str(_recipe(tmp_path, case)), "--out", str(_run_folder(tmp_path, "ok")), "--backend", "hf"]
    if verb == "export":
        folder = _run_folder(tmp_path, {"job": "empty"}.get(case, case))
        return ["export", str(folder), "--format", "mergekit", "--out", str(tmp_path / "m.yaml")]
    # eval
    base = ["eval", "--backend", "hf", "--limit", "2"]
    if case == "model":
        return [*base, "--model", "no-such-org/no-such-model", "--task", "chain_sum"]
    if case == "adapter":
        return [*base, "--model", "tiny-random", "--adapter", str(tmp_path / "nope"), "--task", "chain_sum"]
    if case == "job":
        return [*base, "--model", "tiny-random", "--task", "no_such_task"]
    return [*base, "--recipe", str(_recipe(tmp_path, "reward")), "--task", "chain_sum"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("verb", VERBS)
def test_bad_input_is_one_line_and_exit_2(verb, case, tmp_path):
    result = CliRunner().invoke(app, _args(verb, case, tmp_path))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result.stderr.strip().splitlines()[-1] == errors[0], result.stderr  # after any log
    assert "Traceback" not in result.output


def test_a_real_process_prints_one_line(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "hyper_es", *_args("collect", "model", tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "no-such-org/no-such-model" in proc.stderr
