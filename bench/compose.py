"""Issue 44's composition setting on SmolLM2-135M: adapters that already exist, composed for a target reward.

    python bench/compose.py --root ROOT/compose --stages specialists          # one GRPO-LoRA per skill, once
    python bench/compose.py --root ROOT/compose --stages multitask fewshot    # `hyper-es compare`, seeds 0 1 2
    python bench/compose.py --root ROOT/compose --stages multitask --publish bench/results/compose  # records, to commit
    python bench/compose.py --root ROOT/compose --stages specialists multitask --seeds 1 --arms equal further \
        --restore bench/results/compose    # on a new machine: the committed records back, then arms that need no weights

Specialists: one GRPO-LoRA per skill of `recipes/smollm2-135m-compose.yaml` (its fitness tasks), trained once from
the base on that skill's train split with the recipe's gradient settings for its baseline's steps, seed 0, and stored
as a user's adapters: ROOT/adapters/<skill>/ (a PEFT folder with its manifest). Nothing is tuned per skill. The
settings are the shipped compose recipes, read from ROOT (so `adapters/` resolves there):
- multitask (`smollm2-135m-compose.yaml`): the target is the mean reward over the skills;
- fewshot (`smollm2-135m-compose-fewshot.yaml`): a new skill with a few labelled rows, composed from the same
  specialists.
Each setting runs as `hyper-es compare ROOT/<setting>.yaml --out ROOT/<setting>/`: the GRPO-LoRA baseline's lr grid
on the setting's train rows (multi-task, or the few rows), the main run (each adapter alone, merge-task_arithmetic
and merge-ties at one validated lambda, the search, its start, the gradient-fitted genome), grpo-equal-compute, and
adapter-further (the adapter best alone on validation, trained on with grpo-equal-compute's budget).
A specialist killed mid-training resumes from its last TRL checkpoint; every compare stage resumes from its folder.
--publish copies the specialists' manifests and each setting's records (no weights; `bench/publish.py`) after it runs.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

logger = logging.getLogger("compose")
SETTINGS = {"multitask": "smollm2-135m-compose.yaml", "fewshot": "smollm2-135m-compose-fewshot.yaml"}
ADAPTERS = "adapters"


def setting_recipe(root: Path, setting: str):
    """The shipped recipe of `setting`, copied into ROOT so that its `adapters/` paths resolve to ROOT/adapters."""
    from hyper_es.recipe import load_recipe

    path = root / SETTINGS[setting]
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "recipes" / SETTINGS[setting], path)
    return load_recipe(path)


def train_specialists(root: Path) -> list[Path]:
    """One GRPO-LoRA per skill of the multitask recipe, from the base, into ROOT/adapters/<skill>/ (skipped when
    its manifest is there; resumed from a TRL checkpoint when killed)."""
    from hyper_es import models
    from hyper_es.compare.grid import overlay
    from hyper_es.directions.jobs import JobSpec, plan_baseline
    from hyper_es.directions.train import run_job
    from hyper_es.models.identity import weights_hash
    from hyper_es.recipe import recipe_from_dict
    from hyper_es.rundir import MANIFEST_FILE

    recipe = setting_recipe(root, "multitask")
    base_hash = weights_hash(models.resolve(recipe.model.name, revision=recipe.model.revision))
    done = []
    for skill in recipe.searched_task_names():
        dest = root / ADAPTERS / skill
        if not (dest / MANIFEST_FILE).is_file():
            data = overlay(recipe.model_dump(mode="json"), {"gradient.tasks": [skill], "gradient.checkpoint_every": 5,
                                                            "directions": None, "gradfit": None,
                                                            "compare.further": False})  # no given adapters here
            one = recipe_from_dict(data, root / SETTINGS["multitask"])
            g = one.gradient
            job = JobSpec(skill, g.seed, g.learning_rate, plan_baseline(one).steps, None, 1, g.lora)
            logger.info("specialist %s: %d steps at lr %g on its train split", skill, job.steps, job.learning_rate)
            run_job(one, job, root, base_hash, dest=dest)
        done.append(dest)
    return done


def run_setting(root: Path, setting: str, seeds: list[int], arms: list[str] | None = None) -> None:
    from hyper_es.compare.run import compare

    summary, text = compare(setting_recipe(root, setting), seeds, root / setting, arms=arms)
    print(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, required=True, help="adapters and comparisons (resumable; outside the repo)")
    p.add_argument("--stages", nargs="+", default=["specialists", *SETTINGS], choices=["specialists", *SETTINGS])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--publish", type=Path, help="copy the records (no weights) to PUBLISH/<setting>/, to commit")
    p.add_argument("--restore", type=Path, help="first put RESTORE/<setting>/'s committed records into ROOT/<setting>/ "
                   "(files ROOT has are kept; the specialists are retrained, not restored)")
    p.add_argument("--arms", nargs="+", help="only these compare arms after the grid (default: every arm)")
    args = p.parse_args()
    from hyper_es.progress import setup_logging

    setup_logging()
    if "specialists" in args.stages:
        for folder in train_specialists(args.root):
            logger.info("specialist ready: %s", folder)
    from publish import publish, restore  # bench/publish.py

    if args.publish and (args.root / ADAPTERS).is_dir():  # the specialists' manifests, once
        publish(args.root / ADAPTERS, args.publish / ADAPTERS, root=args.root)
    for setting in (s for s in SETTINGS if s in args.stages):
        if args.restore:
            logger.info("%d records restored into %s", len(restore(args.restore / setting, args.root / setting)),
                        args.root / setting)
        run_setting(args.root, setting, args.seeds, args.arms)
        if args.publish:
            publish(args.root / setting, args.publish / setting, root=args.root)


if __name__ == "__main__":
    main()
