"""The GPU memory plan (`hyper-es check RECIPE --plan`): every shipped GPU recipe plans offline and fits 80 GiB, a
recipe that cannot fit is refused in one line, the recipes' memory notes are the plan's, and the engines and TRL take
their vLLM share from it. Worked out from config shapes (no GPU here): these tests check the accounting, not a card."""

import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import hyper_es as hx
from hyper_es.cli import app
from hyper_es.memory import GIB, ModelShape, model_config, recipe_plan

ROOT = Path(__file__).resolve().parents[1]
GPU = ("qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct", "deepseek-r1-distill-qwen-1.5b",
       "deepseek-r1-distill-qwen-7b")


@pytest.mark.parametrize("name", GPU)
def test_each_gpu_recipe_plans_offline_and_fits_80gib(name):
    out = CliRunner().invoke(app, ["check", str(ROOT / f"recipes/{name}.yaml"), "--plan", "--no-resolve"])
    assert out.exit_code == 0, out.output
    assert "gradient job" in out.output and "search engine" in out.output and "final-evaluation engine" in out.output
    assert " NO" not in out.output


def test_a_7b_recipe_on_24gib_is_refused_in_one_line():
    out = CliRunner().invoke(app, ["check", str(ROOT / "recipes/qwen2.5-7b-instruct.yaml"), "--plan", "--no-resolve",
                                   "--device-memory", "24GiB"])
    assert out.exit_code == 2
    errors = [line for line in out.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "'gradient job'" in errors[0] and "gradient.batch_size" in errors[0]


def test_an_environment_job_plans_its_episodes_tokens_as_the_completion():
    """A GRPO job on an environment holds a whole episode as its completion (TRL's max_completion_length is the
    task's `max_tokens` there): both plans count that, and micro-batches (`accumulation_steps`) shrink it."""
    from hyper_es.memory import host, plan
    from hyper_es.recipe import recipe_from_dict

    shipped = hx.load_recipe(ROOT / "recipes/smollm2-135m-guess.yaml")
    whole = shipped.model_dump(mode="json")
    whole["gradient"].update(batch_size=16, accumulation_steps=1)  # the same 16 episodes a step in one batch
    rec = recipe_from_dict(whole, shipped._path)
    cap = rec.task("guess").environment.max_tokens
    assert rec.completion_cap() == cap and cap > rec.gradient.max_completion_length
    shape = ModelShape.from_config(model_config(rec.model.name)[0])
    assert f"324 prompt + {cap} completion" in host.gradient_stage(rec, shape, 324).notes[0]
    assert f"324 prompt + {cap} completion" in plan.gradient_stage(rec, shape, 80 * GIB, 324).notes[-1]
    assert (shipped.gradient.batch_size, shipped.gradient.accumulation_steps) == (4, 4)  # micro-batches of 4
    assert host.gradient_stage(shipped, shape, 324).peak < host.gradient_stage(rec, shape, 324).peak / 3


def test_the_shapes_give_the_published_parameter_counts():
    """Qwen2.5 model cards: 0.49B, 1.54B, 7.61B parameters."""
    for name, billions in (("Qwen/Qwen2.5-0.5B-Instruct", 0.49), ("Qwen/Qwen2.5-1.5B-Instruct", 1.54),
                           ("Qwen/Qwen2.5-7B-Instruct", 7.61)):
        shape = ModelShape.from_config(model_config(name, resolve=False)[0])
        assert math.isclose(shape.params / 1e9, billions, abs_tol=0.01), (name, shape.params)


def test_the_plan_counts_what_the_real_checkpoint_holds():
    """SmolLM2-135M's own config against its safetensors: the plan's parameter and projection counts are exact."""
    from hyper_es import models
    from hyper_es.directions.sources import tensor_shapes

    path = models.resolve("smollm2-135m-instruct")
    shape = ModelShape.from_config(model_config("smollm2-135m-instruct")[0])
    shapes = tensor_shapes(path)
    assert shape.params == sum(math.prod(s) for s in shapes.values())
    assert shape.numel() == sum(math.prod(s) for n, s in shapes.items() if n.endswith("proj.weight"))


def test_lora_candidates_plan_no_masters_and_inplace_plans_them():
    rec = hx.load_recipe(ROOT / "recipes/qwen2.5-1.5b-instruct.yaml")
    lora = recipe_plan(rec, 80 * GIB, resolve=False).stages[1]
    rec.serve.candidates = "inplace"
    inplace = recipe_plan(rec, 80 * GIB, resolve=False).stages[1]
    assert not any("master" in k for k in lora.parts) and any("master" in k for k in inplace.parts)
    # in place, vLLM's share shrinks to leave room for the masters and deltas beside it
    assert inplace.settings["serve.gpu_memory_utilization"] < lora.settings["serve.gpu_memory_utilization"]


def test_the_recipes_memory_notes_are_the_plans():
    spec = importlib.util.spec_from_file_location("memory_notes", ROOT / "scripts/memory_notes.py")
    notes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(notes)
    for name in GPU:
        path = ROOT / f"recipes/{name}.yaml"
        assert notes.rewritten(path) == path.read_text(), f"{name}: run python scripts/memory_notes.py"
    doc = (ROOT / "docs/gpu.md").read_text()
    assert notes.doc_table(doc) == doc and "| qwen2.5-7b-instruct | 40 GiB |" in doc


def cuda(monkeypatch, total: int) -> None:
    """A CUDA probe injected: a card of `total` bytes (nothing runs on it)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=total))


def test_engines_and_trl_take_their_share_from_the_plan_on_a_gpu(monkeypatch):
    from hyper_es.directions.train import trl_vllm_settings
    from hyper_es.engine import serve_kwargs

    rec = hx.load_recipe(ROOT / "recipes/deepseek-r1-distill-qwen-7b.yaml")
    assert serve_kwargs(rec, "search engine")["gpu_memory_utilization"] is None  # no CUDA: vLLM's CPU sizing
    cuda(monkeypatch, 80 * GIB)
    plan = recipe_plan(rec, 80 * GIB, resolve=False)
    kw = serve_kwargs(rec, "final-evaluation engine")
    assert kw["gpu_memory_utilization"] == plan.stages[2].settings["serve.gpu_memory_utilization"]
    assert kw["max_model_len"] == rec.model.max_model_len and kw["enforce_eager"] is None  # CUDA graphs on GPU
    trl = trl_vllm_settings(rec)
    assert trl["vllm_gpu_memory_utilization"] == plan.stages[0].settings["gradient.vllm_gpu_memory_utilization"]
    assert trl["vllm_max_model_length"] == rec.model.max_model_len  # not R1's 131k context
    # a Ray actor or task with num_gpus 0.5 sees the whole card: its share is the plan of half the card, halved
    from hyper_es.distributed import cluster

    monkeypatch.setattr(cluster, "gpu_share", lambda: 0.5)
    half = recipe_plan(rec, 40 * GIB, resolve=False)
    got = serve_kwargs(rec, "final-evaluation engine")["gpu_memory_utilization"]
    assert got == pytest.approx(half.stages[2].settings["serve.gpu_memory_utilization"] / 2, abs=0.01) and got < 0.5
    got = trl_vllm_settings(rec)["vllm_gpu_memory_utilization"]
    assert got == pytest.approx(half.stages[0].settings["gradient.vllm_gpu_memory_utilization"] / 2, abs=0.01)
    rec.serve.gpu_memory_utilization, rec.gradient.vllm_gpu_memory_utilization = 0.5, 0.2  # set: taken as is
    assert serve_kwargs(rec, "search engine")["gpu_memory_utilization"] == 0.5
    assert trl_vllm_settings(rec)["vllm_gpu_memory_utilization"] == 0.2


def test_a_set_share_that_leaves_no_room_is_refused():
    rec = hx.load_recipe(ROOT / "recipes/qwen2.5-1.5b-instruct.yaml")
    rec.serve.candidates = "inplace"
    rec.serve.gpu_memory_utilization = 0.92
    plan = recipe_plan(rec, 80 * GIB, resolve=False)
    assert "serve.gpu_memory_utilization" in plan.refusal()
