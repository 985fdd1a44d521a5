"""Calibrate task difficulty: greedy accuracy of a base model on several reasoning-gym settings, one engine.

    python bench/calibrate.py --size 300 --dtype float32

GRPO learns only from groups whose rewards differ, and a paired comparison needs accuracies away from 0 and 1,
so the SmolLM2 recipe wants settings where the base scores 20-50% greedy. Rows come from seed 900000 (disjoint
from the recipes' train seed 1 and validation seed 500000). Prints a table and writes bench/results/calibration.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = "{question}\nGive the final answer in \\boxed{{}}."
SETTINGS = {  # name -> (reasoning-gym dataset, config)
    "add_sub_2x2": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "max_digits": 2, "operators": ["+", "-"],
                                         "allow_parentheses": False, "allow_negation": False}),
    "add_2x2": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "max_digits": 2, "operators": ["+"],
                                     "allow_parentheses": False, "allow_negation": False}),
    "add_sub_3x1": ("basic_arithmetic", {"min_terms": 3, "max_terms": 3, "max_digits": 1, "operators": ["+", "-"],
                                         "allow_parentheses": False, "allow_negation": False}),
    "arith_2x2_all": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "max_digits": 2}),
    "chain_sum_2x2": ("chain_sum", {"min_terms": 2, "max_terms": 2, "max_digits": 2}),
    "chain_sum_3x2": ("chain_sum", {"min_terms": 2, "max_terms": 3, "max_digits": 2}),
    "chain_sum_3x1": ("chain_sum", {"min_terms": 3, "max_terms": 3, "max_digits": 1}),
    # Issue 44's candidate skills beyond arithmetic (the composition setting wants the base at 15-50% on each)
    "letters_1to3": ("letter_counting", {"min_words": 1, "max_words": 3}),
    "letters_3to5": ("letter_counting", {"min_words": 3, "max_words": 5}),
    "legs_2x3": ("leg_counting", {"min_animals": 1, "max_animals": 2, "max_instances": 3}),
    "gcd_50": ("gcd", {"max_value": 50}),
    "gcd_200": ("gcd", {"max_value": 200}),
    "lcm_20": ("lcm", {"max_value": 20}),
    "bits_16": ("count_bits", {"max_n": 16}),
    "bits_256": ("count_bits", {"max_n": 256}),
    "sequence_1": ("number_sequence", {"min_terms": 4, "max_terms": 5, "min_value": -20, "max_value": 20,
                                       "max_complexity": 1}),
    "mul_1x1": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "max_digits": 1, "operators": ["*"],
                                     "allow_parentheses": False, "allow_negation": False}),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--size", type=int, default=300)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--settings", default=",".join(SETTINGS))
    p.add_argument("--out", type=Path, default=ROOT / "bench/results/calibration.json")
    args = p.parse_args()

    from hyper_es.engine import make_generator
    from hyper_es.evaluate import evaluate_task
    from hyper_es.recipe import TaskConfig
    from hyper_es.tasks import Task

    gen, tok = make_generator("vllm", args.model, dtype=args.dtype, max_model_len=1024)
    rows = []
    try:
        for name in args.settings.split(","):
            dataset, config = SETTINGS[name]
            task = Task(TaskConfig(name=name, reward="numeric", max_tokens=args.max_tokens,
                                   prompt={"template": TEMPLATE},
                                   test={"source": "reasoning_gym", "dataset": dataset, "size": args.size,
                                         "seed": 900000, "config": config}))
            t0 = time.perf_counter()
            r = evaluate_task(gen, tok, task)
            rows.append({"setting": name, "dataset": dataset, "config": config, "problems": r.problems,
                         "greedy": r.pass_at[1], "tokens": r.tokens, "seconds": time.perf_counter() - t0})
            print(f"{name:<16} {r.pass_at[1]:.3f}  ({r.problems} problems, {r.tokens / r.problems:.1f} tokens each)",
                  flush=True)
    finally:
        gen.close()
    result = {"command": " ".join(["python", *sys.argv]), "model": args.model, "dtype": args.dtype,
              "max_tokens": args.max_tokens, "seed": 900000, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"| setting | dataset | greedy ({args.dtype}) | problems |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['dataset']} | {r['greedy']:.3f} | {r['problems']} |")


if __name__ == "__main__":
    main()
