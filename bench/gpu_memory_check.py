"""Device check of the memory plan (docs/gpu.md): on a CUDA machine without vLLM, measure what the plan works out.

    python bench/gpu_memory_check.py --out OUT [--models 0.5b 1.5b] [--steps 2]

For Qwen2.5-0.5B- and 1.5B-shaped random bf16 weights (the shipped configs), it measures with
torch.cuda.max_memory_allocated what the search worker allocates beside vLLM in both candidate paths (in place:
fp32 masters, prepared deltas and one candidate's merge; LoRA: the stacked factors and one registered adapter's
tensors), then two bf16 GRPO-LoRA steps with gradient checkpointing (TRL with HF generation, the 0.5B recipe's batch
and completion length) against the plan's gradient job less TRL's vLLM share, and what the process holds after the
trainer is gone. It writes OUT/gpu_memory_check.json and prints a table; the plan's numbers are printed beside.
Prepared on CPU and never run yet (no GPU machine was lent while it was written)."""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODELS = {"0.5b": "Qwen/Qwen2.5-0.5B-Instruct", "1.5b": "Qwen/Qwen2.5-1.5B-Instruct"}
GIB = 1 << 30


def random_checkpoint(name: str, folder: Path) -> Path:
    """A save_pretrained folder of `name`'s shape with random bf16 weights and the tiny model's tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    from hyper_es import models
    from hyper_es.memory import model_config

    cfg = AutoConfig.for_model(**{k: v for k, v in model_config(name, resolve=False)[0].items()
                                  if not k.startswith("_")})
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    PreTrainedTokenizerFast.from_pretrained(models.resolve("tiny-random")).save_pretrained(folder)
    del model
    torch.cuda.empty_cache()
    return folder


def directions(base: Path, k: int, r: int):
    import hyper_es as hx
    from hyper_es.directions.sources import Direction, LoraFactors, tensor_shapes

    shapes = {t: s for t, s in tensor_shapes(base).items() if t.endswith("proj.weight")}
    gen = torch.Generator().manual_seed(0)
    return hx.DirectionSet(str(base), [Direction(f"d{i}", {t: LoraFactors(torch.randn(r, s[1], generator=gen) * 1e-2,
                                                                        torch.randn(s[0], r, generator=gen) * 1e-2,
                                                                        2.0) for t, s in shapes.items()})
                                       for i in range(k)])


def peak_of(fn) -> int:
    """Bytes allocated on the GPU at fn's peak, above what was allocated before it (its result kept alive)."""
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    keep = fn()
    peak = torch.cuda.max_memory_allocated() - before
    del keep
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def worker_paths(base: Path, recipe) -> dict:
    """The search worker's own allocations, in place and as LoRA candidates (engine/sources.py, as the worker
    builds them), and the plan's outside-vLLM parts for the same recipe."""
    from hyper_es.directions.sources import checkpoint_tensors, read_tensor
    from hyper_es.engine.sources import MergeSource
    from hyper_es.memory import recipe_plan
    from hyper_es.merging import MergePlan, MergeSettings, genome_for

    g = recipe.gradient
    ds = directions(base, g.directions, g.lora.r)
    genome = genome_for(ds, layer_group_size=recipe.merge.layer_group_size)
    settings = MergeSettings.from_config(recipe.merge)
    cuda = torch.device("cuda")
    files = checkpoint_tensors(base)

    def inplace():
        src = MergeSource(MergePlan(ds, genome, settings, device=cuda, prepare=True))
        src.bind({t: read_tensor(files[t], t).to(cuda, torch.float32) for t in src.names})
        for _, w, _ in src.weights(genome.initial()):  # one candidate, cast as the worker installs it
            w.to(torch.bfloat16)
        return src

    def lora():
        src = MergeSource(MergePlan(ds, genome, settings, device=cuda, prepare=False))
        src.bind({}, device=cuda)
        adapter = [(a.to(torch.bfloat16, copy=True), b.to(torch.bfloat16, copy=True))
                   for _, a, b in src.factors(genome.initial())]
        return src, adapter

    out = {"inplace": peak_of(inplace), "lora": peak_of(lora)}
    plan = {}
    for path in ("inplace", "lora"):
        recipe.serve.candidates = path
        stage = recipe_plan(recipe, torch.cuda.get_device_properties(0).total_memory, resolve=False).stages[1]
        plan[path] = sum(v for k, v in stage.parts.items() if "outside vLLM" in k)
    return {"measured": out, "plan": plan}


def grpo(base: Path, recipe, steps: int, work: Path) -> dict:
    """Two bf16 GRPO-LoRA steps with gradient checkpointing on `base` (TRL with HF generation), and what the process
    holds once the trainer is gone."""
    from hyper_es.directions.jobs import plan_directions
    from hyper_es.directions.train import run_job
    from hyper_es.memory import recipe_plan
    from hyper_es.recipe import recipe_from_dict

    data = recipe.model_dump(mode="json")
    data["model"]["name"] = str(base)
    data["gradient"].update(use_vllm=False, steps=steps, tasks=None, vary=["seed"])
    data["tasks"] = [{"name": "gsm8k", "train": {"source": "file", "path": str(ROOT / "data/gsm8k_test100.jsonl")},
                      "prompt": {"template": "{question}\nPut your final answer within \\boxed{{}}."},
                      "reward": "numeric", "max_tokens": data["gradient"]["max_completion_length"]}]
    local = recipe_from_dict(data, "<gpu check>")
    job = plan_directions(local)[0]
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    run_job(local, job, work, "gpu-check")
    seconds = time.perf_counter() - t0
    peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    gc.collect()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    stage = recipe_plan(recipe, total, resolve=False).stages[0]
    plan = stage.peak - stage.parts.get("TRL's colocated vLLM", 0) - stage.parts["CUDA context"]
    return {"peak_allocated": peak, "peak_reserved": reserved, "plan_without_trl_vllm_and_context": plan,
            "after": {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
                      "used_on_card": total - free}, "seconds": seconds, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_memory_check: needs a CUDA device")
    import hyper_es as hx

    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "models": {}}
    for key in args.models:
        recipe = hx.load_recipe(ROOT / f"recipes/qwen2.5-{key}-instruct.yaml")
        with tempfile.TemporaryDirectory() as tmp:
            base = random_checkpoint(MODELS[key], Path(tmp) / "model")
            row = {"worker": worker_paths(base, recipe)}
            if key == "0.5b":
                row["grpo"] = grpo(base, recipe, args.steps, Path(tmp) / "run")
            result["models"][key] = row
        w = row["worker"]
        for path in ("inplace", "lora"):
            m, p = w["measured"][path], w["plan"][path]
            print(f"{key} worker {path:<8} measured {m / GIB:7.2f} GiB  plan {p / GIB:7.2f} GiB  "
                  f"plan/measured {p / max(m, 1):5.2f}", flush=True)
        if "grpo" in row:
            g = row["grpo"]
            print(f"{key} GRPO {g['steps']} steps: peak {g['peak_allocated'] / GIB:.2f} GiB allocated "
                  f"({g['peak_reserved'] / GIB:.2f} reserved), plan less TRL's vLLM and the context "
                  f"{g['plan_without_trl_vllm_and_context'] / GIB:.2f}; after: {g['after']['allocated'] / GIB:.2f} "
                  f"allocated, {g['after']['used_on_card'] / GIB:.2f} used on the card", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_memory_check.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
