"""The last stage of a run: every row evaluated on the test sets (evaluate/final.py), then the report."""

from __future__ import annotations

import logging
from pathlib import Path

from hyper_es.recipe import Recipe

logger = logging.getLogger(__name__)


def evaluate_and_report(recipe: Recipe, run_dir: Path, backend: str | None) -> dict:
    from hyper_es.evaluate.final import evaluate_run
    from hyper_es.report.build import run_report, write_report

    logger.info("stage 3/4: final evaluation on the held-out test sets")
    rows = evaluate_run(recipe, run_dir, backend=backend)
    logger.info("stage 4/4: report")
    report = run_report(recipe, run_dir, rows)
    write_report(run_dir, report)
    return report
