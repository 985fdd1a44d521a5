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
    p.add_argument("--backend", choices=("vllm", "hf"), default="vllm")
    args = p.parse_args()

    from hyper_es.engine import make_generator
    from hyper_es.evaluate import evaluate_task
    from hyper_es.recipe import TaskConfig
    from hyper_es.tasks import Task

    from hyper_es.errors import DataError

    gen, tok = make_generator(args.backend, args.model, dtype=args.dtype, max_model_len=1024)
    names = args.settings.split(",")
    kept = json.loads(args.out.read_text())["rows"] if args.out.is_file() else []  # other settings' rows stay
    rows = [r for r in kept if r["setting"] not in names]
    try:
        for name in names:
            dataset, config = SETTINGS[name]
            try:
                task = Task(TaskConfig(name=name, reward="numeric", max_tokens=args.max_tokens,
                                       prompt={"template": TEMPLATE},
                                       test={"source": "reasoning_gym", "dataset": dataset, "size": args.size,
                                             "seed": 900000, "config": config}))
                task.rows("test")
            except DataError as exc:  # a problem space too small for the size: recorded, not scored
                rows.append({"setting": name, "dataset": dataset, "config": config, "error": str(exc)})
                print(f"{name:<16} skipped: {exc}", flush=True)
                continue
            t0 = time.perf_counter()
            r = evaluate_task(gen, tok, task)
            rows.append({"setting": name, "dataset": dataset, "config": config, "problems": r.problems,
                         "greedy": r.pass_at[1], "tokens": r.tokens, "seconds": time.perf_counter() - t0,
                         "backend": args.backend})
            print(f"{name:<16} {r.pass_at[1]:.3f}  ({r.problems} problems, {r.tokens / r.problems:.1f} tokens each)",
                  flush=True)
            write(args, rows)  # after each setting: a kill loses only the one being scored
    finally:
        gen.close()
    write(args, rows)
    print(f"| setting | dataset | greedy ({args.dtype}) | problems |\n|---|---|---|---|")
    for r in (r for r in rows if "greedy" in r):
        print(f"| {r['setting']} | {r['dataset']} | {r['greedy']:.3f} | {r['problems']} |")


def write(args, rows: list[dict]) -> None:
    result = {"command": " ".join(["python", *sys.argv]), "model": args.model, "dtype": args.dtype,
              "max_tokens": args.max_tokens, "seed": 900000, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
