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

from hyper_es.cli import app
from recipes import tiny_data

ROOT = Path(__file__).resolve().parents[1]
VERBS = ("check", "collect", "run", "search", "export", "eval")
CASES = ("model", "adapter", "job", "reward")
FIELDS = {"job": {"learning_rate": 1e-4, "seed": 0, "shard": None, "num_shards": 1}, "completions": 8, "tokens": 64, "reward_curve": [], "wall_seconds": 1.0}  # a manifest's other fields


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a missing hub id fails at once instead of trying the network


def _recipe(tmp_path: Path, case: str) -> Path:
    data = tiny_data()
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
    """A run folder damaged for `case`: directions on a missing base, an adapter folder whose weights are damaged (a
    record without weights is a job to train again, not bad input),
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
        if case == "adapter":
            (d / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    recipe = _recipe(tmp_path, "reward" if case == "reward" else "ok")
    (run / "recipe.yaml").write_text(recipe.read_text())
    return run


def _args(verb: str, case: str, tmp_path: Path) -> list[str]:
    out = ["--out", str(tmp_path / "out")]
    if verb == "check":
        return ["check", str(_recipe(tmp_path, case if case != "adapter" else "model"))]
    if verb in ("collect", "run"):
        if case == "adapter":  # a resumed run folder whose finished direction's adapter weights are damaged
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


WRITERS = {  # a command that writes, and the kind of path it writes
    "collect": "folder", "run": "folder", "search": "folder", "es": "folder", "export hf": "folder",
    "export peft": "folder", "export mergekit": "file", "eval": "file",
    "analyze coverage": "folder", "analyze sparsity": "folder", "analyze scale-fit": "folder",
}


@pytest.mark.parametrize("writer", WRITERS)
def test_an_output_path_of_the_other_kind_is_refused_before_any_work(cli, writer, tmp_path):
    """--out naming an existing file where a folder is written (or a folder where a file is): one line, exit 2,
    and the path is left as it was."""
    out = tmp_path / "taken"
    if WRITERS[writer] == "folder":
        out.write_text("mine")
    else:
        (out / "inside").mkdir(parents=True)
    recipe, run = str(_recipe(tmp_path, "ok")), str(_run_folder(tmp_path, "ok"))
    verb, _, fmt = writer.partition(" ")
    args = {"export": ["export", run, "--format", fmt, "--weights", "dir-0=1"],
            "eval": ["eval", "--model", "tiny-random", "--task", "chain_sum", "--backend", "hf", "--limit", "1"],
            "analyze": ["analyze", fmt, run]}.get(verb, [verb, recipe])
    result = cli(*args, "--out", out)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    kind = "is not a folder" if WRITERS[writer] == "folder" else "is a folder; expected a file path"
    assert len(errors) == 1 and f"--out {out}" in errors[0] and kind in errors[0], result.stderr
    assert (out.read_text() == "mine") if WRITERS[writer] == "folder" else sorted(out.iterdir()) == [out / "inside"]


def _adapter(folder: Path, *, widen: bool = False, base: str | None = None) -> Path:
    """A LoRA adapter made with PEFT alone on the tiny model; `widen`: its q_proj A factors one column wider (an
    adapter for another base); `base`: the base its config names."""
    import peft
    import torch
    from safetensors.torch import load_file, save_file

    from hyper_es import models

    torch.manual_seed(0)
    model = peft.get_peft_model(models.load("tiny-random")[0], peft.LoraConfig(r=2, lora_alpha=4,
                                                                               target_modules=["q_proj"]))
    model.save_pretrained(str(folder))
    if widen:
        path = folder / "adapter_model.safetensors"
        save_file({k: torch.cat([v, v[:, :1]], 1) if "lora_A" in k else v for k, v in load_file(path).items()}, path)
    if base:
        cfg = json.loads((folder / "adapter_config.json").read_text())
        (folder / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": base}))
    return folder


@pytest.mark.parametrize("case", ["no config", "another base's shapes"])
def test_eval_with_an_adapter_it_cannot_use_is_one_line(cli, case, tmp_path):
    folder = _adapter(tmp_path / "a", widen=case == "another base's shapes")
    if case == "no config":
        (folder / "adapter_config.json").unlink()
    result = cli("eval", "--model", "tiny-random", "--adapter", folder, "--task", "chain_sum", "--backend", "hf",
                 "--limit", "1", "--out", tmp_path / "r")
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    want = "no adapter_config.json" if case == "no config" else "its tensors do not fit tiny-random (size mismatch"
    assert len(errors) == 1 and f"adapter {folder}" in errors[0] and want in errors[0], result.stderr
    assert not (tmp_path / "r").exists()


def test_eval_with_an_adapter_of_another_named_base_warns(cli, tmp_path, caplog):
    folder = _adapter(tmp_path / "a", base="someone/another-model")
    with caplog.at_level("WARNING"):
        result = cli("eval", "--model", "tiny-random", "--adapter", folder, "--task", "chain_sum", "--backend", "hf",
                     "--limit", "1")
    assert result.exit_code == 0, result.output
    assert [r.getMessage() for r in caplog.records if "names the base" in r.getMessage()] == [
        f"adapter {folder}: its config names the base someone/another-model, not tiny-random; the shapes fit, so it "
        f"is used as given"]
