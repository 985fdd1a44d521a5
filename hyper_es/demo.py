"""`make demo`: evaluate the real SmolLM2-135M-Instruct with vLLM on GSM8K-100 and an arithmetic test split.

This is the foundation-stage demo; later stages extend it to the whole pipeline (collect → search → report).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "smollm2-135m.yaml"


def main(argv: list[str] | None = None) -> int:
    from hyper_es.cli import app

    out = Path("runs/demo/eval.json")
    args = ["eval", "--recipe", str(RECIPE), "--task", "gsm8k", "--task", "chain_sum", "--backend", "vllm",
            "--out", str(out), *(argv or [])]
    t0 = time.perf_counter()
    try:
        app(args, prog_name="hyper-es")
    except SystemExit as exc:
        if exc.code:
            return int(exc.code)
    print(f"demo finished in {time.perf_counter() - t0:.0f} s; results in {out}")
    return 0


if __name__ == "__main__":  # vLLM's engine runs in a spawned process: keep this guard
    sys.exit(main(sys.argv[1:]))
