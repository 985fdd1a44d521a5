"""How many generated tokens come after a completion's boxed answer is complete: what stopping generation there
(issue 44) could save, measured before building it.

    python bench/answer_tail.py --recipe RECIPE --run RUN [--rows 64] [--backend hf|vllm] [--out FILE]

Greedy completions of the recipe's searched tasks on the first `--rows` fitness-pool rows per task, at RUN's
searched genome (RUN/search/best.json merged as searched). A completion's answer is complete at the token where the
first \\boxed{ is closed (braces balanced); its tail is every token after that one. Prints the tokens, the tail's
share, and how completions end (no box, box then end of text within 2 tokens, box then more).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def closed_at(text: str) -> int | None:
    """The character index just past the brace closing the first \\boxed{ (balanced), or None."""
    start = text.find("\\boxed{")
    if start < 0:
        return None
    depth = 0
    for i in range(start + len("\\boxed"), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    return None


def tail_tokens(tok, ids: list[int]) -> int | None:
    """Tokens after the one that completes the first boxed answer; None when no boxed answer is complete."""
    end = closed_at(tok.decode(ids, skip_special_tokens=True))
    if end is None:
        return None
    for k in range(1, len(ids) + 1):
        if len(tok.decode(ids[:k], skip_special_tokens=True)) >= end:
            return len(ids) - k
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", type=Path, required=True)
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from hyper_es.directions import DirectionSet
    from hyper_es.engine import inplace_engine
    from hyper_es.fitness import fitness_splits
    from hyper_es.merging import Genome, recipe_genome
    from hyper_es.recipe import load_recipe

    recipe = load_recipe(args.recipe)
    tasks, pool, _ = fitness_splits(recipe)
    ds = DirectionSet.from_run(args.run)
    _, settings = recipe_genome(recipe, ds)
    genome, best = Genome.from_json(args.run / "search" / "best.json")  # the searched genome, as it was merged
    engine, tok = inplace_engine(recipe, args.backend, ds, genome, settings, args.run / "search" / "engine-tail",
                                 seed=0)
    try:
        engine.set_genome(best)
        max_len = getattr(engine, "max_model_len", None)
        groups = [(t.prompt_ids(tok, pool[t.name][: args.rows], max_len), t.sampling(n=1)) for t in tasks]
        outs = engine.generate_groups(groups)
    finally:
        engine.close()
    per_task = {}
    for t, task_outs in zip(tasks, outs):
        total = tail = boxed = stopped = 0
        for completions in task_outs:
            ids = completions[0]
            total += len(ids)
            after = tail_tokens(tok, ids)
            if after is not None:
                boxed += 1
                tail += after
                stopped += after <= 2
        per_task[t.name] = {"completions": len(task_outs), "tokens": total, "tail_tokens": tail,
                            "tail_share": tail / total if total else 0.0, "boxed": boxed,
                            "ended_within_2": stopped, "max_tokens": t.cfg.max_tokens}
        print(f"{t.name}: {len(task_outs)} completions, {total} tokens, {tail} after the boxed answer "
              f"({100 * tail / max(total, 1):.1f}%); boxed {boxed}, of which {stopped} ended within 2 tokens "
              f"(max_tokens {t.cfg.max_tokens})")
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "backend": args.backend,
                                        "tasks": per_task}, indent=1) + "\n")


if __name__ == "__main__":
    main()
