"""Gradient stage on the tiny model (with a dense reward so directions are non-zero) and the DirectionSet API."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import hyper_es as hx
from hyper_es.directions.collect import collect
from hyper_es.directions.jobs import plan_baseline, plan_directions
from hyper_es.errors import DataError, HyperESError
from recipes import DENSE, tiny_recipe

HELPERS = str(Path(__file__).parent / "helpers")  # on sys.path via conftest; subprocesses get it in PYTHONPATH

RECIPE = DENSE  # the dense tiny recipe (tests/helpers/recipes.py)


def write_recipe(folder: Path, **gradient) -> Path:
    """FOLDER/recipe.yaml: the dense tiny recipe with these gradient fields."""
    tiny_recipe(folder, {"gradient": gradient}, base="dense", write=True)
    return folder / "recipe.yaml"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    recipe = hx.load_recipe(write_recipe(folder))
    collect(recipe, folder / "run")
    return folder / "run"


def adapters(run_dir: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted(run_dir.glob("directions/*/adapter_model.safetensors"))}


def test_collect_writes_adapters_and_manifests(run):
    names = sorted(p.name for p in (run / "directions").iterdir())
    assert names == ["dir-0", "dir-1", "dir-2"]
    m = json.loads((run / "directions/dir-1/manifest.json").read_text())
    assert m["optimizer_steps"] == 3 and m["completions"] == 12 and m["prompts"] == 6
    assert m["job"]["seed"] == 1 and m["lora"]["r"] == 4 and len(m["reward_curve"]) == 3
    assert len(m["base"]["sha256"]) == 64 and m["versions"]["trl"] and m["wall_seconds"] > 0
    # tokens: generated tokens only (TRL's num_tokens, prompts included, is seen_tokens)
    assert m["tokens"] == m["token_curve"][-1][1] and abs(m["tokens"] - m["mean_completion_length"] * 12) <= 1
    assert 0 < m["tokens"] < m["seen_tokens"] and [s for s, _ in m["token_curve"]] == [1, 2, 3]
    assert (run / "recipe.yaml").is_file()
    ds = hx.DirectionSet.from_run(run)
    assert ds.names == ["dir-0", "dir-1", "dir-2"]
    assert all(float(ds.delta(k, t).abs().max()) > 0 for k in range(3) for t in ds.tensor_names()[:1])


def test_rerun_skips_finished_jobs(run, caplog):
    before = {p: p.stat().st_mtime_ns for p in run.glob("directions/*/manifest.json")}
    with caplog.at_level("INFO"):
        collect(hx.load_recipe(run.parent / "recipe.yaml"), run)
    assert {p: p.stat().st_mtime_ns for p in run.glob("directions/*/manifest.json")} == before
    assert sum("already finished" in r.message for r in caplog.records) == 3


def test_a_record_without_its_weights_is_a_job_to_train_again(run, tmp_path, caplog):
    """A job folder holding its manifest but not its adapter (records restored without weights, a disk lost) is not
    read as done: collect trains that job again, and only that one (to the same weights: the job is deterministic)."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (copy / "directions/dir-1/adapter_model.safetensors").unlink()
    with caplog.at_level("INFO"):
        collect(hx.load_recipe(run.parent / "recipe.yaml"), copy)
    assert sum("already finished" in r.message for r in caplog.records) == 2
    assert any("dir-1: its record is here without its weights" in r.message for r in caplog.records)
    assert adapters(copy) == adapters(run)


def test_other_recipe_on_same_run_dir_is_refused(run, tmp_path):
    other = hx.load_recipe(write_recipe(tmp_path, steps=4))
    with pytest.raises(HyperESError, match="different recipe .*gradient"):
        collect(other, run)


def test_a_resume_rewrites_the_recorded_recipe_for_a_change_it_reads_not_for_compare_alone(tmp_path):
    """An arm resumed under a later `compare` (its grid's start) keeps the recipe it ran, a comparison's own folder
    records it; an eval change is recorded."""
    from hyper_es.directions.collect import prepare_run_dir

    path = write_recipe(tmp_path)
    recipe = hx.load_recipe(path)
    prepare_run_dir(recipe, tmp_path / "run")
    saved = (tmp_path / "run" / "recipe.yaml").read_text()
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "compare": {"lrs": [1e-3, 2e-3, 4e-3]}}))
    prepare_run_dir(hx.load_recipe(path), tmp_path / "run")
    assert (tmp_path / "run" / "recipe.yaml").read_text() == saved
    prepare_run_dir(hx.load_recipe(path), tmp_path / "run", comparison=True)  # a comparison's folder records it
    assert hx.load_recipe(tmp_path / "run" / "recipe.yaml").compare.lrs == [1e-3, 2e-3, 4e-3]
    path.write_text(yaml.safe_dump({**data, "eval": {**data.get("eval", {}), "seed": 7}}))
    prepare_run_dir(hx.load_recipe(path), tmp_path / "run")
    assert hx.load_recipe(tmp_path / "run" / "recipe.yaml").eval.seed == 7


def test_sigkill_during_job_2_then_resume_equals_uninterrupted(tmp_path):
    """Job 1 is not retrained, and the final set is bitwise equal to an uninterrupted run (TRL on CPU, 1 thread,
    is deterministic: two runs with the same seeds give identical adapters)."""
    recipe = write_recipe(tmp_path, steps=4)
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": HELPERS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "hyper_es", "collect", str(recipe), "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # kill mid-training: after job 2 logged its second optimizer step
        if "job dir-1 step 2/4" in line:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "collect finished before it could be killed"
    assert (out / "directions/dir-0/manifest.json").is_file()
    assert not (out / "directions/dir-1").exists()  # nothing half-written looks finished
    job1 = (out / "directions/dir-0/adapter_model.safetensors").stat().st_mtime_ns

    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "job dir-0 already finished" in resumed.stderr.replace("\n", " ")
    assert (out / "directions/dir-0/adapter_model.safetensors").stat().st_mtime_ns == job1

    clean = tmp_path / "clean"
    collect(hx.load_recipe(recipe), clean)
    assert adapters(out) == adapters(clean)


def test_resume_from_a_checkpoint_after_epoch_0_equals_uninterrupted(tmp_path):
    """TRL's sampler draws each epoch's order from one generator; a job resumed in epoch 1 sees epoch 1's order."""
    recipe = write_recipe(tmp_path, directions=1, steps=8, checkpoint_every=2)
    data = yaml.safe_load(recipe.read_text())
    data["tasks"][0]["train"]["size"] = 8  # 2 prompts a step: 4 steps an epoch
    recipe.write_text(yaml.safe_dump(data))
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": HELPERS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "hyper_es", "collect", str(recipe), "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "job dir-0 step 7/8" in line:  # checkpoint-6 is 2 steps into epoch 1
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "collect finished before it could be killed"
    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "(resuming " in resumed.stderr

    clean = tmp_path / "clean"
    collect(hx.load_recipe(recipe), clean)
    assert adapters(out) == adapters(clean)


def test_delta_equals_merge_and_unload(run, tiny_path):
    from peft import PeftModel

    ds = hx.DirectionSet.from_run(run)
    base, _ = _load(tiny_path)
    base_sd = {k: v.clone() for k, v in base.state_dict().items()}
    merged = PeftModel.from_pretrained(base, str(run / "directions/dir-2")).merge_and_unload().state_dict()
    touched = ds.tensor_names()
    assert len(touched) == 4 * 3  # 4 layers × (q, v, down)
    for t in touched:
        assert torch.equal(base_sd[t] + ds.delta("dir-2", t), merged[t]), t
    for t in set(ds.base_shapes) - set(touched):  # stored tensors (a tied lm_head is not stored)
        assert torch.equal(base_sd[t], merged[t])
        assert not ds.delta(2, t).any()


def _load(path):
    from hyper_es import models

    return models.load(str(path))


def test_from_checkpoints_matches_adapters(run, tiny_path, tmp_path):
    from peft import PeftModel

    ckpts = []
    for name in ("dir-0", "dir-1"):
        base, tok = _load(tiny_path)
        merged = PeftModel.from_pretrained(base, str(run / "directions" / name)).merge_and_unload()
        merged.save_pretrained(tmp_path / name)
        ckpts.append(tmp_path / name)
    from_ckpt = hx.DirectionSet.from_checkpoints(str(tiny_path), ckpts)
    from_lora = hx.DirectionSet.from_adapters(str(tiny_path), [run / "directions/dir-0", run / "directions/dir-1"])
    assert from_ckpt.names == from_lora.names == ["dir-0", "dir-1"]
    for t in from_ckpt.tensor_names():
        for k in range(2):
            torch.testing.assert_close(from_ckpt.delta(k, t), from_lora.delta(k, t), rtol=0, atol=1e-6)
    g1, g2 = from_ckpt.geometry(), from_lora.geometry()
    assert g1["cosine"][0][1] == pytest.approx(g2["cosine"][0][1], abs=1e-4)


def test_geometry(run):
    ds = hx.DirectionSet.from_run(run)
    g = ds.geometry()
    cos = torch.tensor(g["cosine"])
    assert torch.allclose(cos.diagonal(), torch.ones(3)) and torch.allclose(cos, cos.T)
    assert 1.0 <= g["effective_rank"] <= 3.0
    assert set(g["layer_norms"]["dir-0"]) == {"0", "1", "2", "3"}
    same = hx.DirectionSet.from_adapters(ds.base, [run / "directions/dir-0"] * 2, names=["a", "b"]).geometry()
    assert same["cosine"][0][1] == pytest.approx(1.0) and same["effective_rank"] == pytest.approx(1.0, abs=1e-3)


def test_save_load_roundtrip(run, tmp_path, tiny_path):
    ds = hx.DirectionSet.from_run(run)
    dense = hx.DirectionSet.from_dicts(str(tiny_path), {"d": {t: ds.delta(0, t) for t in ds.tensor_names()}})
    for original in (ds, dense):
        loaded = hx.DirectionSet.load(original.save(tmp_path / original.names[0]))
        assert loaded.names == original.names and loaded.tensor_names() == original.tensor_names()
        for k in range(len(original)):
            for t in original.tensor_names():
                assert torch.equal(loaded.delta(k, t), original.delta(k, t))


def test_lazy_dtype_and_rslora(run, tmp_path):
    ds = hx.DirectionSet.from_run(run)
    t = ds.tensor_names()[0]
    assert ds.delta(0, t, dtype=torch.bfloat16).dtype == torch.bfloat16
    src = run / "directions/dir-0"
    rs = tmp_path / "rs"
    rs.mkdir()
    (rs / "adapter_model.safetensors").write_bytes((src / "adapter_model.safetensors").read_bytes())
    cfg = json.loads((src / "adapter_config.json").read_text())
    cfg["use_rslora"] = True
    (rs / "adapter_config.json").write_text(json.dumps(cfg))
    rs_ds = hx.DirectionSet.from_adapters(ds.base, [rs])
    # rslora scales by alpha/sqrt(r) instead of alpha/r: here r=4, so twice the delta.
    torch.testing.assert_close(rs_ds.delta(0, t), 2 * ds.delta(0, t))


def test_malformed_inputs(run, tmp_path, tiny_path):
    from hyper_es.models import tiny

    good = run / "directions/dir-0"
    with pytest.raises(DataError, match="no such folder"):
        hx.DirectionSet.from_adapters(str(tiny_path), [tmp_path / "absent"])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text((good / "adapter_config.json").read_text())
    with pytest.raises(DataError, match="not a PEFT adapter folder"):
        hx.DirectionSet.from_adapters(str(tiny_path), [broken])
    with pytest.raises(DataError, match="not a PEFT adapter folder"):
        hx.DirectionSet.from_adapters(str(tiny_path), [tiny_path])  # a model folder, not an adapter
    other = tiny.build(tmp_path / "other-base", seed=1)  # same shapes, different weights
    with pytest.raises(DataError, match=r"direction 'dir-0' .*trained on a base with weights sha256"):
        hx.DirectionSet(str(other), hx.DirectionSet.from_run(run).directions)
    wide = _wide_tiny(tmp_path / "wide")
    with pytest.raises(DataError, match=r"direction 'dir-0' .*: tensor 'model.layers.0.mlp.down_proj.weight' has shape"):
        hx.DirectionSet.from_adapters(str(wide), [good])
    with pytest.raises(DataError, match="tensor 'nope.weight' is not in the base model"):
        hx.DirectionSet.from_dicts(str(tiny_path), {"x": {"nope.weight": torch.zeros(2, 2)}})


def _wide_tiny(out):
    from transformers import AutoConfig, AutoModelForCausalLM

    from hyper_es import models

    cfg = AutoConfig.from_pretrained(models.resolve("tiny-random"))
    cfg.intermediate_size = 96
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    return out


def test_job_planning():
    recipe = hx.Recipe.model_validate({**RECIPE, "gradient": {
        **RECIPE["gradient"], "directions": 3, "vary": ["seed", "shard", "learning_rate"],
        "jobs": [{"name": "slow", "steps": 9}]}})
    jobs = plan_directions(recipe)
    assert [j.name for j in jobs] == ["slow", "dir-1", "dir-2"]
    assert [j.seed for j in jobs] == [0, 1, 2] and [j.shard for j in jobs] == [0, 1, 2]
    assert [j.learning_rate for j in jobs] == pytest.approx([0.005, 0.01, 0.02])
    assert [j.steps for j in jobs] == [9, 3, 3]
    assert plan_baseline(recipe).steps == 17  # ceil(15 / 0.9): Hyper-ES uses 90% of the baseline's steps


def test_eval_with_adapter_merges_it(cli, run, tiny_path, tmp_path):
    from safetensors.torch import load_file

    from hyper_es import models

    folder = models.with_adapter(str(tiny_path), run / "directions/dir-1")
    assert models.with_adapter(str(tiny_path), run / "directions/dir-1") == folder  # cached
    merged, base = load_file(str(folder / "model.safetensors")), load_file(str(tiny_path / "model.safetensors"))
    ds = hx.DirectionSet.from_run(run)
    for t in ds.tensor_names():
        assert torch.equal(merged[t], base[t] + ds.delta("dir-1", t))
    out = tmp_path / "e.json"
    proc = cli("eval", "--model", tiny_path, "--adapter", run / "directions/dir-1", "--task", "chain_sum", "--backend",
               "hf", "--limit", "2", "--max-tokens", "4", "--out", out)
    assert proc.exit_code == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text())["model"] == str(folder)


def test_cli_export_formats(cli, run, tmp_path):
    w = ["--weights", "dir-0=0.5,dir-1=0.3,dir-2=0.2"]
    # DARE-TIES masks entries: its update is full rank, so a rank-16 LoRA is refused at the default --max-error
    refused = cli("export", run, "--format", "peft", "--out", tmp_path / "peft", *w)
    assert refused.exit_code == 2 and "nothing written" in refused.stderr and not (tmp_path / "peft").exists()
    for fmt, out, more in (("mergekit", tmp_path / "m.yaml", []), ("peft", tmp_path / "peft", ["--max-error", "1"]),
                           ("hf", tmp_path / "hf", [])):
        proc = cli("export", run, "--format", fmt, "--out", out, *w, *more)
        assert proc.exit_code == 0, proc.stderr[-2000:]
        assert out.exists()
        if fmt == "peft":  # accepted when asked, and it says how far off it is
            assert "off the merged update" in proc.stdout
    cfg = yaml.safe_load((tmp_path / "m.yaml").read_text())
    assert cfg["merge_method"] == "dare_ties"
    assert cfg["models"][0]["parameters"]["weight"] == [0.5] * 4  # one value per layer of the tiny model


def _export(cli, run, tmp_path, *args) -> str:
    """`hyper-es export RUN ARGS` in this process: its one error line (exit 2), and nothing written to tmp_path/x."""
    result = cli("export", run, *args)
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and not (tmp_path / "x").exists(), result.stderr
    return lines[0]


def test_export_refuses_what_it_cannot_use_in_one_line(cli, run, tmp_path):
    from hyper_es.merging import Genome

    x = ["--out", str(tmp_path / "x")]
    assert "--weights: expected one weight for each of dir-0, dir-1, dir-2" in _export(
        cli, run, tmp_path, "--format", "hf", *x, "--weights", "dir-0=1")
    assert "no genome; run the search first" in _export(cli, run, tmp_path, "--format", "hf", *x)
    assert f"--genome {tmp_path / 'nope.json'}: no such file" in _export(
        cli, run, tmp_path, "--format", "hf", *x, "--genome", str(tmp_path / "nope.json"))
    other = Genome(directions=("a", "b"), num_layers=4, layer_group_size=2)
    (tmp_path / "other.json").write_text(other.to_json(other.uniform(1.0)))
    assert "a genome over the directions a, b;" in _export(
        cli, run, tmp_path, "--format", "peft", *x, "--genome", str(tmp_path / "other.json"))


def test_a_checkpoint_cut_short_while_saving_is_skipped(tmp_path):
    """Trainer writes trainer_state.json last: a checkpoint without a readable one was killed mid-save."""
    from hyper_es.directions.train import last_checkpoint

    for step, state in ((5, "{}"), (10, "{}"), (15, None), (20, '{"cut')):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if state is not None:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-10", "checkpoint-5"]
    assert last_checkpoint(tmp_path / "none") is None


def test_accumulation_steps_make_each_optimizer_step_see_more_completions(tmp_path):
    """gradient.accumulation_steps: TRL accumulates N batches per optimizer step; the manifest counts every
    completion generated (steps × batch × N) and every generated token, step by step."""
    recipe = hx.load_recipe(write_recipe(tmp_path, directions=1, steps=2, accumulation_steps=3))
    (job,) = collect(recipe, tmp_path / "run")
    m = json.loads((job / "manifest.json").read_text())
    assert m["optimizer_steps"] == 2 and m["completions"] == 2 * 4 * 3 and m["grpo"]["accumulation_steps"] == 3
    assert [s for s, _ in m["token_curve"]] == [1, 2] and 0 < m["token_curve"][0][1] < m["tokens"] <= 24 * 16
