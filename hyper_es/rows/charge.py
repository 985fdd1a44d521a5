"""Every row's cost, charged in one place: what the run spent to produce and to choose it (hyper_es/cost.py's
record). A row is charged its gradient jobs (a snapshot pro rata, up to its step), the search or ES stage it came
from (their result.json `cost`), and the validation scorings that chose it (early stopping's every candidate, a
scale scan, a prompt control's scan). The registry (rows/kinds.py) names each kind's charge."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hyper_es.cost import Cost, read_stage_cost
from hyper_es.directions.difficulty import difficulty_path
from hyper_es.directions.manifest import adapter_started, finished_jobs, read_manifest, read_record
from hyper_es.io import read_json
from hyper_es.rundir import DIRECTIONS_DIR, ES_DIR, EVAL_DIR, GRADFIT_DIR, RESULT_FILE, SEARCH_DIR
from hyper_es.tasks.proposals import proposal_cost
from hyper_es.rows.names import baseline_candidate



@dataclass
class Context:
    """What the charges of one run's rows share: its directions, the search stage's cost and scan, and the
    validation scorings that chose rows."""
    dirs: list[str]
    search: Cost = field(default_factory=Cost)
    scan: dict = field(default_factory=dict)
    val: dict = field(default_factory=dict)
    _directions: dict = field(default_factory=dict, repr=False)  # run folder -> its directions' cost, read once

    def directions_of(self, run_dir: Path) -> Cost:
        """`directions_cost` of the run's directions, computed once per run folder for every row that needs it."""
        key = str(run_dir)
        if key not in self._directions:
            self._directions[key] = directions_cost(run_dir, self.dirs)
        return self._directions[key]


def jobs_cost(run_dir: Path, names: list[str]) -> Cost:
    """Optimizer steps, generated training tokens and wall seconds summed over gradient-stage jobs."""
    ms = [read_record(Path(run_dir) / DIRECTIONS_DIR / n) for n in names]  # an imported direction cost this run nothing
    return Cost(steps=sum(m["optimizer_steps"] for m in ms), train_tokens=sum(m["tokens"] for m in ms),
                seconds=sum(m["wall_seconds"] for m in ms))


def directions_cost(run_dir: Path, names: list[str]) -> Cost:
    """The directions' jobs, plus the base pass-rate measurement that binned them (`vary: difficulty`)."""
    cost = jobs_cost(run_dir, names)
    path = difficulty_path(run_dir)
    if path.is_file():
        measured = read_json(path, "delete it to measure again")
        cost = cost + Cost(train_tokens=int(measured.get("tokens", 0)), seconds=float(measured.get("seconds", 0.0)))
    return cost


def search_cost(run_dir: Path, result: dict, log: list[dict]) -> tuple[Cost, dict]:
    """(the search stage's cost, its scale scan) from RUN/search/result.json as read (`result`; {}: a search that
    has not finished is its generations so far). `log`: the per-generation records (generations.jsonl)."""
    scan = result.get("scale_scan") or {}

    def legacy(result: dict) -> Cost:  # written before the cost record: the report rebuilt it from the log
        tokens, seconds = proposal_cost(run_dir, SEARCH_DIR)
        stage = result.get("stage_seconds", result.get("search_seconds"))
        return Cost(search_tokens=sum(r.get("tokens", 0) for r in log) + scan.get("tokens", 0) + tokens,
                    select_tokens=result.get("val_tokens", 0), seconds=None if stage is None else stage + seconds)

    return read_stage_cost(result, legacy), scan


def es_stage_cost(run_dir: Path, *, proposals: bool = True) -> Cost:
    """RUN/es/result.json's cost; `proposals=False` leaves out the template proposals (a run's one proposals file,
    charged to the search already when ES starts from it)."""
    es = read_json(Path(run_dir) / ES_DIR / RESULT_FILE, "delete it to finish ES again (re-run)")

    def legacy(result: dict) -> Cost:
        tokens, seconds = proposal_cost(run_dir, ES_DIR) if proposals else (0, 0.0)
        return Cost(search_tokens=result.get("tokens", 0) + tokens, select_tokens=result.get("val_tokens", 0),
                    seconds=None if result.get("seconds") is None else result["seconds"] + seconds)

    return read_stage_cost(es, legacy, skip=() if proposals else ("proposals",))


def selection_costs(run_dir: Path, rows: list[dict]) -> dict:
    """Validation spent choosing rows: the scoring of every baseline candidate that was scored (early stopping:
    the base, each snapshot and the final, also those not tested; with a baseline trained on a given adapter, that
    adapter instead of the base, and every given adapter, which chose it), and each scale scan (`scaled`, merge-<method>)
    by its row's name."""
    val = Path(run_dir) / EVAL_DIR / "val"
    # a baseline trained on top of a given adapter: the given adapters' validation scorings chose that adapter
    start = adapter_started(Path(run_dir) / DIRECTIONS_DIR / "baseline")
    chosen = {m["name"] for _, m in finished_jobs(run_dir) if "imported" in m} if start else set()
    cands = [read_json(p, "delete it to score that candidate again") for p in sorted(val.glob("*.json"))
             if baseline_candidate(p.stem, start) or p.stem in chosen]
    scans = {r["name"]: Cost(select_tokens=r["val"].get("tokens", 0), seconds=r["val"].get("seconds", 0.0))
             for r in rows if r["kind"] in ("scaled", "merge") and "val" in r}
    return {"baseline": Cost(select_tokens=sum(v.get("tokens", 0) for v in cands),
                             seconds=sum(v.get("seconds", 0.0) for v in cands)), **scans}


def context(run_dir: Path, rows: list[dict], log: list[dict], result: dict) -> Context:
    """What the rows' charges share; `log` and `result`: the search's generations.jsonl and result.json as read."""
    search, scan = search_cost(run_dir, result, log)
    return Context(dirs=[m["name"] for _, m in finished_jobs(run_dir)], search=search, scan=scan,
                   val=selection_costs(run_dir, rows))


# --- each kind's charge: (run_dir, row {"name", "steps"}, Context) -> Cost ---------------------------------------
def base_cost(run_dir, row, ctx) -> Cost:
    return Cost(steps=row["steps"])


def job_cost(run_dir, row, ctx) -> Cost:
    return jobs_cost(run_dir, [row["name"]])


def uniform_cost(run_dir, row, ctx) -> Cost:
    return ctx.directions_of(run_dir)


def hyper_es_cost(run_dir, row, ctx) -> Cost:
    return ctx.directions_of(run_dir) + ctx.search


def start_cost(run_dir, row, ctx) -> Cost:
    """The search's start without the search: the directions, then the scale scan on the fitness rows."""
    return ctx.directions_of(run_dir) + Cost(search_tokens=ctx.scan.get("tokens", 0),
                                                     seconds=ctx.scan.get("seconds") or 0.0)


def gradfit_cost(run_dir, row, ctx) -> Cost:
    """The gradient-fitted control: the directions, the scale scan that chose its start, then its GRPO steps."""
    fit = read_json(Path(run_dir) / GRADFIT_DIR / RESULT_FILE, "delete the gradfit folder to fit again")
    return start_cost(run_dir, row, ctx) + read_stage_cost(fit, lambda r: Cost(train_tokens=None, seconds=None))


def merge_cost(run_dir, row, ctx) -> Cost:
    """A merge-<method> control: the directions, then its lambda's scan on validation."""
    return ctx.directions_of(run_dir) + scan_cost(row, ctx)


def scan_cost(row: dict, ctx) -> Cost:
    """The validation scan that chose the row's scale (`scaled`, merge-<method>); none before it is scanned."""
    return ctx.val.get(row["name"], Cost())


def snapshot_cost(run_dir, row, ctx) -> Cost:
    """The baseline run's tokens up to the snapshot (its token curve) and its wall time pro rata; choosing it
    (early stopping) scored every candidate of the baseline on validation."""
    job = read_manifest(Path(run_dir) / DIRECTIONS_DIR / "baseline")
    curve, steps = dict(map(tuple, job.get("token_curve") or [])), row["steps"]
    return Cost(steps=steps, train_tokens=int(curve[steps]) if steps in curve else None,
                seconds=job["wall_seconds"] * steps / job["optimizer_steps"]) + ctx.val["baseline"]


def scaled_cost(run_dir, row, ctx) -> Cost:
    """The baseline's job, then the scale scan on validation (its tokens are the row's selection cost)."""
    return jobs_cost(run_dir, ["baseline"]) + scan_cost(row, ctx)


def es_cost(run_dir, row, ctx) -> Cost:
    """ES's cost, after a sequenced start's (the baseline's job, or the directions and the search)."""
    from hyper_es.es.history import es_start

    start = es_start(run_dir)
    before = (Cost() if start == "base" else jobs_cost(run_dir, ["baseline"]) if start == "baseline"
              else ctx.directions_of(run_dir) + ctx.search)
    shared = start == "hyper-es" and proposal_cost(run_dir, SEARCH_DIR)[0] > 0  # the search's proposals, counted once
    return before + es_stage_cost(run_dir, proposals=not shared)


def es_grpo_cost(run_dir, row, ctx) -> Cost:
    """ES's cost, then the GRPO-LoRA job trained on ES's weights."""
    from hyper_es.es.history import grpo_folder

    job = read_manifest(grpo_folder(run_dir))
    return es_cost(run_dir, row, ctx) + Cost(steps=job["optimizer_steps"], train_tokens=job["tokens"],
                                             seconds=job["wall_seconds"])
