"""The row registry: every kind of row a run compares declares, in one place, how its weight update ΔW is built,
how it is charged (rows/charge.py: a hyper_es/cost.py record) and whether the final evaluation samples it for
Pass@k. The report and `row_update` read it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from hyper_es.cost import Cost
from hyper_es.errors import DataError
from hyper_es.io import read_json
from hyper_es.rows.charge import (Context, base_cost, es_cost, es_grpo_cost, gradfit_cost, hyper_es_cost, job_cost,
                                  merge_cost, scaled_cost, snapshot_cost, start_cost, uniform_cost)
from hyper_es.tasks.prompt_genome import PROMPT_FILE
from hyper_es.rows import names
from hyper_es.rundir import ADAPTER_CONFIG, BEST_FILE, DIRECTIONS_DIR, ES_DIR, EVAL_DIR, GRADFIT_DIR, RESULT_FILE, SEARCH_DIR



@dataclass(frozen=True)
class RowKind:
    name: str
    pass_k: bool  # also sampled n times per problem for Pass@k (costly: only the rows the report compares)
    cost: Callable[[Path, dict, Context], Cost]  # (run_dir, row {"name", "steps"}, context): rows/charge.py
    update: Callable[[Path, str, object], dict[str, torch.Tensor]] | None  # (run_dir, row name, recipe) -> ΔW


def _scaled_update(run_dir: Path, row: str, recipe) -> dict[str, torch.Tensor]:
    """The baseline's ΔW times the scale chosen on validation (eval/val/scaled.json)."""
    scale = read_json(run_dir / EVAL_DIR / "val" / "scaled.json", "delete it to scan the scales again")["scale"]
    return {t: scale * d for t, d in _adapter_update(run_dir, "baseline", recipe).items()}


def _merge_update(run_dir: Path, row: str, recipe) -> dict[str, torch.Tensor]:
    """The search directions merged by the row's method at mergekit's defaults, times the lambda chosen on
    validation (eval/val/<row>.json)."""
    from hyper_es.directions import DirectionSet
    from hyper_es.merging import unit_merge

    scale = read_json(run_dir / EVAL_DIR / "val" / f"{row}.json", "delete it to scan the scales again")["scale"]
    merged = unit_merge(DirectionSet.from_run(run_dir), names.merge_method(row), recipe.merge.seed)
    return {t: scale * d for t, d in merged.items()}


def _adapter_update(run_dir: Path, row: str, recipe) -> dict[str, torch.Tensor]:
    from hyper_es.directions.jobs import SNAPSHOTS
    from hyper_es.directions.manifest import adapter_started
    from hyper_es.directions.set import adapter_delta

    step = names.snapshot_step(row)
    name = "baseline" if step is not None else row
    folder = run_dir / DIRECTIONS_DIR / name / (f"{SNAPSHOTS}/step-{step}" if step is not None else "")
    if not (folder / ADAPTER_CONFIG).is_file():
        raise DataError(f"{folder}: no adapter for row '{row}' (expected hyper-es, es, baseline, baseline@N or a "
                        f"direction of the run)")
    delta = adapter_delta(recipe.model.name, folder, row)
    start = adapter_started(run_dir / DIRECTIONS_DIR / "baseline") if name == "baseline" else None
    for t, d in (_adapter_update(run_dir, start, recipe) if start else {}).items():  # trained on top of it
        delta[t] = delta[t] + d if t in delta else d
    return delta


def _searched_update(run_dir: Path, genome, x, recipe) -> dict[str, torch.Tensor]:
    """A vector of the search's genome merged over the run's directions as the search merges."""
    from hyper_es.directions import DirectionSet
    from hyper_es.merging import MergePlan, recipe_genome

    ds = DirectionSet.from_run(run_dir)
    _, settings = recipe_genome(recipe, ds)
    return {t: d.float() for t, d in MergePlan(ds, genome, settings).deltas(x)}


def _hyper_es_update(run_dir: Path, row: str, recipe) -> dict[str, torch.Tensor]:
    """best.json merged as searched."""
    from hyper_es.merging import Genome

    return _searched_update(run_dir, *Genome.from_json(run_dir / SEARCH_DIR / BEST_FILE), recipe)


def _gradfit_update(run_dir: Path, row: str, recipe) -> dict[str, torch.Tensor]:
    """The gradient-fitted genome (gradfit/best.json) merged as the search merges."""
    from hyper_es.merging import Genome

    return _searched_update(run_dir, *Genome.from_json(run_dir / GRADFIT_DIR / BEST_FILE), recipe)


def _start_update(run_dir: Path, row: str, recipe) -> dict[str, torch.Tensor]:
    """The scale scan's x0 merged as the search would have merged it."""
    start = start_genome(run_dir)
    if start is None:
        raise DataError(f"{run_dir / SEARCH_DIR / RESULT_FILE}: no scale scan, so no search-start row")
    return _searched_update(run_dir, *start, recipe)


def start_genome(run_dir: Path):
    """(the searched genome, the scale scan's x0) of a finished search, as the `search-start` row merges it; None
    when the search did not scan scales (its start is then the recipe's x0, not a chosen one)."""
    import numpy as np

    from hyper_es.merging import Genome

    path = run_dir / SEARCH_DIR / RESULT_FILE
    scan = read_json(path, "delete it to finish the search again (re-run)").get("scale_scan") if path.is_file() else None
    if not scan:
        return None
    genome, _ = Genome.from_json(run_dir / SEARCH_DIR / BEST_FILE)
    x0 = np.asarray(scan["x0"], dtype=float)
    if x0.shape != (genome.size,):
        raise DataError(f"{path}: scale_scan.x0 has {x0.size} values; expected {genome.size}, the genome of "
                        f"search/best.json")
    return genome, x0


def _es_update(run_dir: Path, row: str, recipe) -> dict[str, torch.Tensor]:
    """The replayed history (after its start, when sequenced)."""
    from hyper_es import models
    from hyper_es.es.delta import es_delta

    return es_delta(run_dir, models.resolve(recipe.model.name, revision=recipe.model.revision))[0]


def _es_grpo_update(run_dir: Path, row: str, recipe) -> dict[str, torch.Tensor]:
    return es_grpo_delta(run_dir, recipe.model.name)


def es_grpo_delta(run_dir: str | Path, base: str) -> dict[str, torch.Tensor]:
    """{tensor: ΔW} of the ES → GRPO-LoRA model (`base`: the run's base model name): ES's kept update plus the
    adapter's, in fp32."""
    from hyper_es.directions import DirectionSet
    from hyper_es.es.delta import es_delta
    from hyper_es.es.history import GRPO_JOB, grpo_folder

    lora = DirectionSet.from_adapters(base, [grpo_folder(run_dir)], [GRPO_JOB])
    delta, _ = es_delta(run_dir, lora.base_path)
    for t in lora[0].parts:
        d = lora.delta(0, t)
        delta[t] = delta[t] + d if t in delta else d.clone()
    return delta


KINDS = {k.name: k for k in (
    RowKind("base", True, base_cost, lambda run_dir, row, recipe: {}),
    RowKind("direction", False, job_cost, _adapter_update),
    RowKind("uniform", False, uniform_cost, None),
    RowKind("baseline-snapshot", False, snapshot_cost, _adapter_update),
    RowKind("baseline", True, job_cost, _adapter_update),  # the final adapter: no choice made on validation
    RowKind("scaled", False, scaled_cost, _scaled_update),
    RowKind("es", True, es_cost, _es_update),
    RowKind("es-grpo", True, es_grpo_cost, _es_grpo_update),
    RowKind("hyper-es", True, hyper_es_cost, _hyper_es_update),
    RowKind("search-start", False, start_cost, _start_update),  # the scale scan's x0: the search's ablation
    RowKind("grad-fit", True, gradfit_cost, _gradfit_update),  # the search's genome fitted by gradient: a control
    RowKind("merge", False, merge_cost, _merge_update),  # the directions merged by a method at one validated lambda
)}


def kind_of(row: str) -> RowKind:
    """The kind of a row by its name, as plan_rows names them: base, uniform, hyper-es, search-start, grad-fit,
    merge-<method>, scaled,
    es / <start>+es, …es+grpo, baseline, baseline@N, else a direction; any of them + "+prompt" (co-evolved) is
    its kind."""
    if names.is_prompted(row):  # a row's weights with a chosen prompt: the kind (cost, update) of the weights
        return kind_of(names.weights_of(row))
    if row in ("base", "uniform", "hyper-es", "baseline", "scaled", "search-start", "grad-fit"):
        return KINDS[row]
    if names.merge_method(row) is not None:
        return KINDS["merge"]
    if names.is_es_grpo(row):
        return KINDS["es-grpo"]
    if names.is_es(row):
        return KINDS["es"]
    return KINDS["baseline-snapshot" if names.snapshot_step(row) is not None else "direction"]


PROMPTED = {"hyper-es": SEARCH_DIR, "es": ES_DIR}  # a co-evolved <row>+prompt's kind -> the folder of its prompt.json


def prompt_file(run_dir: str | Path, row: str) -> Path:
    """The prompt of a `<row>+prompt` row: co-evolved (RUN/search or RUN/es prompt.json), else a prompt control's
    choice on validation (`coevolve.controls`: RUN/eval/val/<row>+prompt.json, with the tokens of its scan)."""
    kind = kind_of(row).name
    if kind in PROMPTED:
        return Path(run_dir) / PROMPTED[kind] / PROMPT_FILE
    return Path(run_dir) / EVAL_DIR / "val" / f"{row}.json"


def row_update(run_dir: str | Path, row: str, recipe) -> dict[str, torch.Tensor]:
    """ΔW of a row, as {tensor: fp32 tensor}: what the sparsity analysis cuts and what ES can start from."""
    kind = kind_of(row)
    if kind.update is None:
        raise DataError(f"row '{row}' ({kind.name}) has no single update to build; expected hyper-es, es, baseline, "
                        f"baseline@N or a direction of the run")
    return kind.update(Path(run_dir), row, recipe)
