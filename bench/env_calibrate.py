"""How a base model does on the shipped environments (issue 45): success, tool calls and turns per episode.

    python bench/env_calibrate.py --model smollm2-135m-instruct --episodes 64 --horizons 1 2 3 4 [--no-demo] [--out FILE]

Greedy episodes (`hyper_es.environments.run_episodes` on a vLLM engine, or `--backend hf`; the tokenizer's chat
template where it renders tool calls, else TRL's Qwen2.5 template), seed 900000 for the rows, each row's prompt
opening with the environment's demonstration unless `--no-demo`. The issue wants the base to succeed sometimes, not
always, at horizon 1. Prints one line per environment and horizon and writes the records' summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--horizons", type=int, nargs="+", default=[1])
    ap.add_argument("--max-turns", type=int, help="default: the horizon + 1 (each step a turn, then an answer)")
    ap.add_argument("--turn-tokens", type=int, default=96)
    ap.add_argument("--backend", choices=["vllm", "hf"], default="vllm")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--no-demo", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from hyper_es.engine import make_generator
    from hyper_es.environments import SHIPPED, Limits, rows, run_episodes, summary

    engine, tok = make_generator(args.backend, args.model, dtype=args.dtype, batch_size=args.episodes)
    out = []
    for name, cls in SHIPPED.items():
        for h in args.horizons:
            t0, turns = time.perf_counter(), args.max_turns or h + 1
            limits = Limits(max_turns=turns, max_tokens=turns * args.turn_tokens, turn_tokens=args.turn_tokens)
            played = run_episodes(engine, tok, cls, rows(name, args.episodes, 900000, h, demo=not args.no_demo), limits)
            n, counts = len(played), summary(played)
            entry = {"environment": name, "horizon": h, "episodes": n, "max_turns": turns,
                     "success": sum(e.reward for e in played) / n,
                     "with_tool_calls": sum(e.tool_calls > 0 for e in played) / n,
                     "mean_turns": counts["turns"] / n, "mean_tokens": counts["tokens"] / n, "ends": counts["ends"],
                     "seconds": time.perf_counter() - t0}
            out.append(entry)
            print(f"{name} h{h}: success {entry['success']:.3f}, episodes with a tool call "
                  f"{entry['with_tool_calls']:.3f}, turns {entry['mean_turns']:.2f}, tokens {entry['mean_tokens']:.1f}, "
                  f"ends {entry['ends']}", flush=True)
    engine.close()
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "model": args.model, "backend": args.backend,
                                        "dtype": args.dtype, "demo": not args.no_demo,
                                        "turn_tokens": args.turn_tokens, "max_turns": args.max_turns or "horizon + 1",
                                        "results": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
