"""What `executor.isolate` costs on a CPU: one GRPO-LoRA job of the recipe run in this process (the first one, which
pays the imports, and a later one) and in a child process of its own (spawned: it pays the imports again).

    python bench/isolate.py --recipe recipes/tiny.yaml --repeats 2      # bench/results/isolate.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hyper_es.io import write_json_atomic  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", type=Path, default=Path("recipes/tiny.yaml"))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/isolate.json")
    args = ap.parse_args()

    from hyper_es.directions.jobs import plan_directions
    from hyper_es.directions.train import run_job
    from hyper_es.models import resolve
    from hyper_es.models.identity import weights_hash
    from hyper_es.progress import setup_logging
    from hyper_es.recipe import load_recipe
    from hyper_es.recipe.isolate import in_own_process

    setup_logging()
    recipe = load_recipe(args.recipe)
    always = recipe.model_copy(update={"executor": recipe.executor.model_copy(update={"isolate": "always"})})
    base_hash = weights_hash(resolve(recipe.model.name, revision=recipe.model.revision))
    job = plan_directions(recipe)[0]
    times: dict[str, list[float]] = {"first_in_process": [], "in_process": [], "child": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats * 2 + 1):  # the first in-process job, then child and in-process alternating
            kind = "first_in_process" if i == 0 else ("child" if i % 2 else "in_process")
            t0 = time.perf_counter()
            if kind == "child":
                in_own_process(always, f"job {job.name}", run_job, job, Path(tmp) / str(i), base_hash)
            else:
                run_job(recipe, job, Path(tmp) / str(i), base_hash)
            times[kind].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {"command": " ".join(["python", *sys.argv]), "recipe": str(args.recipe), "job": job.name, "steps": job.steps, "seconds": times,
              "child_over_in_process": med["child"] / med["in_process"],
              "spawn_overhead_s": med["child"] - med["in_process"]}
    write_json_atomic(args.out, result)
    print(f"one job: in process {med['in_process']:.1f} s (the first, with imports: {med['first_in_process']:.1f} s); "
          f"in a child {med['child']:.1f} s: {result['child_over_in_process']:.1f}x, "
          f"+{result['spawn_overhead_s']:.1f} s per job")


if __name__ == "__main__":
    main()
