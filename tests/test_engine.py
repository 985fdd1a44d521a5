"""The engine package: one dtype rule, and nothing below search imports it."""

import re
from pathlib import Path

import pytest
import torch

import hyper_es as hx
from hyper_es.engine import engine_dtype, inplace_engine
from hyper_es.merging import recipe_genome

ROOT = Path(__file__).resolve().parents[1]


def test_one_dtype_rule():
    assert engine_dtype("vllm", "bfloat16", "float32") == "bfloat16"  # eval.dtype overrides
    assert engine_dtype("vllm", "auto", "float32") == "float32"  # else the recipe's model.dtype
    assert engine_dtype("hf", "auto", "bfloat16") == "bfloat16"
    assert engine_dtype("vllm") == "bfloat16" and engine_dtype("hf") == "float32"  # no recipe: backend default


def test_inplace_engine_honours_the_recipe_dtype(tmp_path):
    recipe = hx.load_recipe(ROOT / "recipes/tiny.yaml")
    from hyper_es import models

    base = models.resolve("tiny-random")
    sd = {"model.layers.0.self_attn.q_proj.weight": torch.ones(64, 64) * 0.1}  # large enough to survive bf16
    ds = hx.DirectionSet.from_dicts(str(base), {"a": sd})
    for eval_dtype, want in (("auto", torch.float32), ("bfloat16", torch.bfloat16)):
        recipe.eval.dtype = eval_dtype
        genome, settings = recipe_genome(recipe, ds)
        engine, _ = inplace_engine(recipe, "hf", ds, genome, settings, tmp_path, seed=0)
        assert next(engine.model.parameters()).dtype == want
        engine.close()


def test_hf_engines_run_where_torch_sees_a_gpu(tmp_path, monkeypatch):
    """The HF fallback loads onto the GPU when there is one, and a merge keeps its deltas there (merge_device auto)
    or on the CPU (merge_device cpu), in `delta_dtype`; on this CPU machine the model stays on the CPU."""
    from hyper_es import models
    from hyper_es.engine.sources import MergeWeights
    from hyper_es.merging import MergeSettings, genome_for

    assert models.default_device() == ("cuda" if torch.cuda.is_available() else "cpu")
    model, _ = models.load("tiny-random", device="meta")
    assert next(model.parameters()).device.type == "meta"
    sd = {"model.layers.0.self_attn.q_proj.weight": torch.ones(64, 64) * 1e-3}
    ds = hx.DirectionSet.from_dicts(str(models.resolve("tiny-random")), {"a": sd})
    for where, want in (("auto", "meta"), ("cpu", "cpu")):
        w = MergeWeights(ds, genome_for(ds), MergeSettings("task_arithmetic"), merge_device=where, prepare=False,
                         delta_dtype="bfloat16")
        plan = w.source(device="meta").plan
        assert str(plan.device) == want and plan.dtype == torch.bfloat16
    recipe = hx.load_recipe(ROOT / "recipes/tiny.yaml")
    engine, _ = inplace_engine(recipe, "hf", ds, *recipe_genome(recipe, ds), tmp_path, seed=0)
    assert next(engine.model.parameters()).device.type == models.default_device()
    engine.close()


def test_evaluate_and_engine_never_import_search():
    for pkg in ("evaluate", "engine"):
        for path in (ROOT / "hyper_es" / pkg).glob("*.py"):
            assert not re.search(r"hyper_es\.search|from hyper_es import search", path.read_text()), path


def test_worker_refusal_comes_back_as_one_error(tiny_path, tmp_path):
    """Inside vLLM's worker, a direction on a tensor the engine lacks becomes {"error": ...}, which the driver
    raises as a HyperESError (exception types do not survive the trip back). Here the worker extension runs on a
    plain HF model, whose unfused q/k/v have no vLLM `qkv_proj` to write into."""
    from types import SimpleNamespace

    from hyper_es import models
    from hyper_es.engine.vllm_worker import HyperESWorker
    from hyper_es.merging import MergeSettings, genome_for

    sd = {"model.layers.0.self_attn.q_proj.weight": torch.ones(64, 64) * 1e-3}
    ds = hx.DirectionSet.from_dicts(str(tiny_path), {"a": sd})
    genome = genome_for(ds)
    (tmp_path / "genome.json").write_text(genome.to_json())
    worker = HyperESWorker()
    worker.model_runner = SimpleNamespace(model=models.load(str(tiny_path))[0])
    spec = {"weights": "merge", "set_dir": str(ds.save(tmp_path / "set")), "genome": str(tmp_path / "genome.json"),
            "settings": MergeSettings().__dict__, "base": str(tiny_path)}
    out = worker.hx_load(spec)
    assert set(out) == {"error"} and "qkv_proj" in out["error"] and "\n" not in out["error"]


def test_a_16_bit_inplace_engine_that_would_round_the_update_away_is_refused(tmp_path):
    """DARE-TIES in bf16 over an update far below bf16's spacing: refused before the engine loads, in one line naming
    the opt-in; with serve.lossy_inplace the recipe gets its engine."""
    from hyper_es import models
    from hyper_es.errors import HyperESError

    recipe = hx.load_recipe(ROOT / "recipes/tiny.yaml")
    recipe.eval.dtype = "bfloat16"
    sd = {"model.layers.0.self_attn.q_proj.weight": torch.ones(64, 64) * 1e-6}
    ds = hx.DirectionSet.from_dicts(str(models.resolve("tiny-random")), {"a": sd})
    genome, settings = recipe_genome(recipe, ds)
    with pytest.raises(HyperESError, match="serve.lossy_inplace: true"):
        inplace_engine(recipe, "hf", ds, genome, settings, tmp_path, seed=0)
    recipe.serve.lossy_inplace = True
    engine, _ = inplace_engine(recipe, "hf", ds, genome, settings, tmp_path, seed=0)
    assert engine.last_fidelity == 0.0  # the resting weights: the base
    engine.close()
