"""The GRPO-LoRA baseline, tuned with the care the search gets (the toolkit's grid, hyper_es/compare/grid.py): a
learning-rate grid on validation, extended until its best learning rate is interior, snapshots every few steps for
early stopping, and the base as the step-0 candidate. Per seed, every run resumes from its folder.

    python bench/baseline_grid.py --root ROOT/decide2 --seeds 0 1 2     # writes ROOT/decide2/seed<N>/lr_grid.json

A learning rate scores its best trained adapter by validation (a snapshot or the final; ties: fewer steps). The
grid starts at `--lrs` (a grid begun earlier goes on from its recorded start, and a recorded lr is kept as
recorded); while the best is its smallest (largest) learning rate, half that (twice that) is added, at most
`--max-lrs` in all. The baseline row of a seed is then the best candidate by validation at the chosen
learning rate, the base included (that is, no training is a candidate too).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hyper_es.compare import grid  # noqa: E402
from hyper_es.recipe import load_recipe  # noqa: E402

logger = logging.getLogger("baseline_grid")


def variant(path: Path, *, lr: float, seed: int, pass_k_limit: int | None = None, overrides: dict | None = None,
            suffix: str = ""):
    """The recipe at `path` at this learning rate and seed (hyper_es/compare/grid.py's `variant`)."""
    return grid.variant(load_recipe(path), lr=lr, seed=seed, pass_k_limit=pass_k_limit, overrides=overrides,
                        suffix=suffix)


def lr_folder(root: Path, seed: int, lr: float) -> Path:
    return root / f"seed{seed}-lr{lr:g}"


def tune(recipe_path: Path, root: Path, seed: int, lrs: list[float], max_lrs: int = 6) -> dict:
    """The bracketed grid of one seed (resumes; the result in ROOT/seed<N>/lr_grid.json)."""
    return grid.tune(root / f"seed{seed}" / "lr_grid.json", lrs,
                     lambda lr: grid.score_lr(variant(recipe_path, lr=lr, seed=seed), lr_folder(root, seed, lr)),
                     seed=seed, max_lrs=max_lrs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", type=Path, default=ROOT / "recipes/smollm2-135m.yaml")
    p.add_argument("--root", type=Path, required=True, help="run folders (resumable; keep outside the repo)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--lrs", type=float, nargs="+", default=[1.25e-4, 2.5e-4, 5e-4])
    p.add_argument("--max-lrs", type=int, default=6)
    args = p.parse_args()
    from hyper_es.progress import setup_logging

    setup_logging()
    for seed in args.seeds:
        r = tune(args.recipe, args.root, seed, args.lrs, args.max_lrs)
        print(f"seed {seed}: lr {r['chosen']:g} (interior: {r['interior']}), baseline row {r['baseline_best']}")
    print(f"command: python {' '.join(sys.argv)}")


if __name__ == "__main__":
    main()
