"""Where the search starts and what it may return: the scale scan before CMA-ES, the validation guard after it.

Scale first: a merge of K directions at x0 is often far too small or too large a step (half of a trained update
can beat the whole one). Scoring a handful of global scales of x0 on the fitness set costs a few candidates and
puts CMA-ES where the signal is, with a step size that matches the scan's resolution.

The guard: a search that cannot show, on the validation rows, that its genome beats where it started returns
its starting point, so a noisy search never makes the model worse than its start.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from hyper_es.errors import DataError
from hyper_es.io import read_json, write_json_atomic

logger = logging.getLogger(__name__)
SCAN = "scale_scan.json"


def scale_scan(score, genome, x0, scales: list[float], out: Path) -> dict:
    """Score `scale × x0` for each scale (`score(x) -> Score`); returns {x0, sigma0, best_scale, fitness, ...},
    kept in RUN/search/scale_scan.json so a resumed search starts from the same point without re-scoring."""
    path = out / SCAN
    if path.is_file():
        scan = read_json(path, "delete it (and checkpoint.json) to scan again")
        if scan.get("scales") != list(scales):
            raise DataError(f"{path}: made for scales {scan.get('scales')}, the recipe has {list(scales)}; delete it "
                            f"and checkpoint.json to search again")
        return scan
    t0 = time.perf_counter()
    scores = [score(genome.scaled(x0, s)) for s in scales]
    fitness = [sc.reward for sc in scores]
    # Ties (common on a few dozen 0/1 rewards) go to the scale nearest 1, x0 itself.
    best = min((i for i, f in enumerate(fitness) if f == max(fitness)), key=lambda i: abs(scales[i] - 1.0))
    ordered = sorted(scales)
    step = float(np.median(np.diff(ordered))) if len(ordered) > 1 else 1.0
    coef = np.asarray(x0[: len(genome.keys)], dtype=float)
    scan = {"scales": list(scales), "fitness": fitness, "best_scale": scales[best],
            "x0": genome.scaled(x0, scales[best]).tolist(),
            "sigma0": max(step * float(np.sqrt(np.mean(coef ** 2))), 1e-3),
            "evals": len(scales), "tokens": sum(sc.tokens for sc in scores), "seconds": time.perf_counter() - t0}
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, scan)
    logger.info("scale scan: %s -> start at scale %g, sigma0 %.3f",
                ", ".join(f"{s:g}: {f:.3f}" for s, f in zip(scales, fitness)), scan["best_scale"], scan["sigma0"])
    return scan


def guard(val_score, x0, x_best) -> tuple[dict, dict]:
    """Keep the searched genome only if it beats x0 on the validation rows (the same rows, so paired).
    Returns the decision and the two validation Scores {"x0": ..., "search": ...}."""
    start, found = val_score(x0), val_score(x_best)
    return guard_decision(start, found), {"x0": start, "search": found}


def guard_decision(start, found, what: str = "searched genome") -> dict:
    """Keep `found` only if its validation score is strictly higher than `start`'s (Scores of the same rows)."""
    diff = np.asarray(found.per_row) - np.asarray(start.per_row)
    kept = "search" if found.reward > start.reward else "x0"
    decision = {"x0_val": start.reward, "best_val": found.reward, "kept": kept, "rows": int(diff.size),
                "better_rows": int((diff > 0).sum()), "worse_rows": int((diff < 0).sum())}
    log = logger.info if kept == "search" else logger.warning
    log("validation guard: %s %.3f vs start %.3f on %d rows (%d better, %d worse): keeping %s", what,
        found.reward, start.reward, diff.size, decision["better_rows"], decision["worse_rows"], kept)
    return decision
