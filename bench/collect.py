"""One GRPO-LoRA job through `hyper_es` collect vs a plain TRL script with the same settings, side by side.

    python bench/collect.py --steps 5 --repeats 2

Each variant runs in a fresh child process; the order alternates (hx, plain, hx, plain, ...). Prints a table and
writes JSON. Both variants see the same rows, prompts, reward and GRPOConfig, so their adapters should be identical:
the script checks that too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = "{question}\nGive the final answer in \\boxed{{}}."


def recipe_dict(model: str, steps: int) -> dict:
    return {
        "name": "bench-collect",
        "model": {"name": model, "dtype": "float32"},
        "tasks": [{"name": "chain_sum", "reward": "numeric", "prompt": {"template": TEMPLATE},
                   "train": {"source": "reasoning_gym", "dataset": "chain_sum", "size": 256, "seed": 1}}],
        "gradient": {"directions": 1, "steps": steps, "batch_size": 8, "num_generations": 4,
                     "max_completion_length": 32, "learning_rate": 5e-4, "lora": {"r": 8, "alpha": 16}},
    }


def child_hx(model: str, steps: int, out: Path) -> dict:
    import datasets  # noqa: F401  - the same imports as the plain script, outside the timed region
    import peft  # noqa: F401
    import reasoning_gym  # noqa: F401
    import trl  # noqa: F401
    from trl import GRPOTrainer  # noqa: F401

    import hyper_es as hx
    from hyper_es.directions.collect import collect

    recipe = hx.recipe.recipe_from_dict(recipe_dict(model, steps))
    t0 = time.perf_counter()
    folder = collect(recipe, out)[0]
    total = time.perf_counter() - t0
    manifest = json.loads((folder / "manifest.json").read_text())
    return {"total_s": total, "train_s": manifest["wall_seconds"], "steps": manifest["optimizer_steps"],
            "adapter": str(folder / "adapter_model.safetensors")}


def child_plain(model: str, steps: int, out: Path) -> dict:
    """What a TRL user would write by hand: reasoning-gym rows, a chat prompt, a reward function, GRPOTrainer."""
    import datasets
    import peft
    import reasoning_gym
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    import hyper_es as hx
    from hyper_es import models
    from hyper_es.directions import collect  # noqa: F401  - imported by the hx child too

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    path = models.resolve(model)
    tok = AutoTokenizer.from_pretrained(path)
    net = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    rows = [{"prompt": [{"role": "user", "content": TEMPLATE.format(question=x["question"])}], "answer": x["answer"]}
            for x in reasoning_gym.create_dataset("chain_sum", size=256, seed=1)]
    numeric = hx.rewards.get("numeric")

    def reward(prompts, completions, answer, **_):
        return [numeric(c[-1]["content"], a) for c, a in zip(completions, answer)]

    r = recipe_dict(model, steps)["gradient"]
    cfg = GRPOConfig(output_dir=str(out / "trainer"), max_steps=steps, learning_rate=r["learning_rate"], seed=0,
                     data_seed=0, per_device_train_batch_size=r["batch_size"], num_generations=r["num_generations"],
                     max_completion_length=r["max_completion_length"], temperature=1.0, beta=0.0, loss_type="dapo",
                     scale_rewards="group", logging_steps=1, report_to="none", disable_tqdm=True, save_strategy="no",
                     use_cpu=True, bf16=False, gradient_checkpointing=False, lr_scheduler_type="constant",
                     warmup_steps=0)
    lora = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    trainer = GRPOTrainer(model=net, processing_class=tok, reward_funcs=[reward], args=cfg,
                          train_dataset=datasets.Dataset.from_list(rows), peft_config=lora)
    t1 = time.perf_counter()
    trainer.train()
    train = time.perf_counter() - t1
    trainer.model.save_pretrained(str(out / "adapter"))
    return {"total_s": time.perf_counter() - t0, "train_s": train, "steps": trainer.state.global_step,
            "adapter": str(out / "adapter" / "adapter_model.safetensors")}


def run_child(kind: str, model: str, steps: int, out: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--model", model, "--steps", str(steps), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode:
        raise SystemExit(f"{kind} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "collect.json")
    ap.add_argument("--child", choices=["hx", "plain"])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.child:
        res = (child_hx if args.child == "hx" else child_plain)(args.model, args.steps, args.out)
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(res))
        return

    runs: dict[str, list[dict]] = {"hx": [], "plain": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for kind in ("hx", "plain") if i % 2 == 0 else ("plain", "hx"):
                res = run_child(kind, args.model, args.steps, Path(tmp) / f"{kind}-{i}")
                res["adapter_bytes"] = Path(res.pop("adapter")).read_bytes()
                runs[kind].append(res)
        identical = all(a["adapter_bytes"] == b["adapter_bytes"] for a, b in zip(runs["hx"], runs["plain"]))
    summary = {}
    for kind, rs in runs.items():
        train = sum(r["train_s"] for r in rs) / len(rs)
        summary[kind] = {"train_s": train, "total_s": sum(r["total_s"] for r in rs) / len(rs),
                         "steps_per_s": rs[0]["steps"] / train, "peak_rss_mb": max(r["peak_rss_mb"] for r in rs)}
    ratio_train = summary["hx"]["train_s"] / summary["plain"]["train_s"]
    ratio_total = summary["hx"]["total_s"] / summary["plain"]["total_s"]
    command = "python bench/collect.py " + " ".join(sys.argv[1:])
    print(f"\n{command}\nmodel {args.model}, {args.steps} GRPO steps, {args.repeats} runs each (alternating)\n")
    print(f"{'variant':<10}{'train s':>10}{'total s':>10}{'steps/s':>10}{'peak RSS MB':>14}")
    for kind, s in summary.items():
        print(f"{kind:<10}{s['train_s']:>10.1f}{s['total_s']:>10.1f}{s['steps_per_s']:>10.3f}{s['peak_rss_mb']:>14.0f}")
    print(f"\nratio hx/plain: train {ratio_train:.3f}, total {ratio_total:.3f}; adapters identical: {identical}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"command": command, "model": args.model, "steps": args.steps,
                                     "summary": summary, "ratio_train": ratio_train, "ratio_total": ratio_total,
                                     "adapters_identical": identical}, indent=1))


if __name__ == "__main__":
    main()
