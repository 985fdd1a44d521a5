"""How a base model does on the shipped environments (issue 45): success, tool calls and turns per episode.

    python bench/env_calibrate.py --model smollm2-135m-instruct --episodes 16 --horizons 1 [--out FILE]

Greedy episodes on the HF backend (`hyper_es.environments.run_episodes`, the tokenizer's chat template where it
renders tool calls, else TRL's Qwen2.5 template), seed 900000 for the rows. The issue wants the base to succeed
sometimes, not always, at horizon 1. Prints one line per environment and horizon and writes the records' summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--horizons", type=int, nargs="+", default=[1])
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--turn-tokens", type=int, default=96)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from hyper_es import models
    from hyper_es.engine.hf import HFGenerator
    from hyper_es.environments import SHIPPED, Limits, rows, run_episodes

    model, tok = models.load(args.model)
    engine = HFGenerator(model, tok, batch_size=args.episodes)
    limits = Limits(max_turns=args.max_turns, max_tokens=args.max_turns * args.turn_tokens,
                    turn_tokens=args.turn_tokens)
    out = []
    for name, cls in SHIPPED.items():
        for h in args.horizons:
            t0 = time.perf_counter()
            records = [e.record() for e in run_episodes(engine, tok, cls, rows(name, args.episodes, 900000, h), limits)]
            n = len(records)
            entry = {"environment": name, "horizon": h, "episodes": n,
                     "success": sum(r["reward"] for r in records) / n,
                     "with_tool_calls": sum(r["tool_calls"] > 0 for r in records) / n,
                     "mean_turns": sum(r["turns"] for r in records) / n,
                     "mean_tokens": sum(r["tokens"] for r in records) / n,
                     "ends": dict(Counter(r["end"].split(":")[0] for r in records)),
                     "seconds": time.perf_counter() - t0}
            out.append(entry)
            print(f"{name} h{h}: success {entry['success']:.3f}, episodes with a tool call "
                  f"{entry['with_tool_calls']:.3f}, turns {entry['mean_turns']:.2f}, tokens {entry['mean_tokens']:.1f}, "
                  f"ends {entry['ends']}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "model": args.model, "limits": vars(limits),
                                        "results": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
