"""Rewrite the GPU recipes' memory notes and docs/gpu.md's plan table from the memory plan
(tests/test_memory_plan.py keeps them equal).

    python scripts/memory_notes.py            # rewrite recipes/*.yaml and docs/gpu.md in place
    python scripts/memory_notes.py --check    # exit 1 if a note or the table differs from the plan
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from hyper_es.memory import GIB, recipe_plan
from hyper_es.memory.table import plan_markdown, recipe_note
from hyper_es.recipe import load_recipe

ROOT = Path(__file__).resolve().parent.parent
RECIPES, DOC = ROOT / "recipes", ROOT / "docs" / "gpu.md"
TABLE = re.compile(r"(<!-- plan table: scripts/memory_notes.py -->\n).*?(<!-- end of plan table -->)", re.S)
GPU_RECIPES = ("qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct",
               "deepseek-r1-distill-qwen-1.5b", "deepseek-r1-distill-qwen-7b")
HEAD = ("# GPU memory (`hyper-es check RECIPE --plan --no-resolve`: worked out from the model's config, not measured;\n"
        "# each stage in its own process), on one 80 GiB GPU:\n")
BLOCK = re.compile(r"^# GPU memory .*?(?=^# Candidates:|^name:)", re.S | re.M)


def note(path: Path) -> str:
    return HEAD + "\n".join(recipe_note(recipe_plan(load_recipe(path), 80 * GIB, resolve=False))) + "\n"


def rewritten(path: Path) -> str:
    text = path.read_text()
    if not BLOCK.search(text):
        raise SystemExit(f"{path}: no '# GPU memory' note before '# Candidates:' or 'name:'")
    return BLOCK.sub(lambda _: note(path), text, count=1)


def doc_table(text: str) -> str:
    plans = [recipe_plan(load_recipe(RECIPES / f"{n}.yaml"), g * GIB, resolve=False) for g in (40, 80)
             for n in GPU_RECIPES]
    return TABLE.sub(lambda m: m.group(1) + "\n".join(plan_markdown(plans)) + "\n" + m.group(2), text, count=1)


def main(check: bool) -> int:
    bad = 0
    for path, make in [(RECIPES / f"{n}.yaml", rewritten) for n in GPU_RECIPES] + [(DOC, None)]:
        new = make(path) if make else doc_table(path.read_text())
        if new != path.read_text():
            bad += 1
            if check:
                print(f"{path.name}: memory note differs from the plan; run python scripts/memory_notes.py")
            else:
                path.write_text(new)
                print(f"rewrote {path.name}")
    return 1 if check and bad else 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv[1:]))
