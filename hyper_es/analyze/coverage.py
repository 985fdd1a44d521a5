"""`hyper-es analyze coverage RUN…`: does a method keep coverage (Pass@k at large k) or collapse onto fewer answers?

From the evaluated rows' per-problem records (RUN/eval/<row>.json; rows with sampled records: the base, the
baseline, Hyper-ES, ES): the Pass@k curve k = 1…n, each row's distribution of per-problem solve rates
(correct / n), and the problems a row solves (in any of its n samples) that no other row solves. Rows of several
runs are compared on the problems they share (matched by id), and named `<run folder>/<row>` when more than one
run is given. For an ES run, the population's answer diversity per iteration (RUN/es/history.jsonl: distinct
final answers per fitness prompt across members, and the share of prompts some member solves) is added. Writes
coverage.json and PNG figures to --out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hyper_es.errors import DataError
from hyper_es.evaluate.passk import mean_pass_at_k
from hyper_es.io import read_json, write_json_atomic
from hyper_es.rundir import ES_CONFIG, ES_DIR, ES_HISTORY, EVAL_DIR

BINS = np.linspace(0, 1, 11)


def sampled_rows(run_dirs: list[Path]) -> dict[str, dict[str, dict[str, tuple[int, int]]]]:
    """{row label: {task: {problem id: (n, correct)}}} for every evaluated row with sampled records."""
    out = {}
    for run in run_dirs:
        files = sorted((Path(run) / EVAL_DIR).glob("*.json"))
        if not files:
            raise DataError(f"{run}: no evaluated rows in eval/ (run `hyper-es run` first)")
        for path in files:
            row = read_json(path, "delete it to evaluate this row again")
            tasks = {}
            for task, res in (row.get("results") or {}).items():
                rec = res.get("records") or {}
                if "correct" not in rec:
                    continue
                ns = rec["n"] if isinstance(rec["n"], list) else [rec["n"]] * len(rec["correct"])
                tasks[task] = {i: (n, c) for i, n, c in zip(rec["ids"], ns, rec["correct"])}
            if tasks:
                out[f"{Path(run).name}/{row['name']}" if len(run_dirs) > 1 else row["name"]] = tasks
    if not out:
        raise DataError("no row has sampled records (Pass@k rows: the base, the baseline, Hyper-ES, ES)")
    return out


def es_diversity(run_dirs: list[Path]) -> dict[str, list[dict]]:
    """{run label: [per-iteration diversity]} for the runs with an ES history that logged it."""
    out = {}
    for run in run_dirs:
        path = Path(run) / ES_DIR / ES_HISTORY
        if path.is_file():
            from hyper_es.es.history import read_history

            config = read_json(Path(run) / ES_DIR / ES_CONFIG, "delete RUN/es to restart ES")
            curve = [r["diversity"] for r in read_history(path, config["es"]["population"]) if "diversity" in r]
            if curve:
                out[Path(run).name] = curve
    return out


def coverage(run_dirs: list[Path], diversity_from: list[Path] | None = None) -> dict:
    """`diversity_from`: the ES runs whose population diversity is added (default: `run_dirs`)."""
    rows = sampled_rows([Path(r) for r in run_dirs])
    tasks = sorted(set.intersection(*(set(t) for t in rows.values())))
    div = es_diversity([Path(r) for r in (run_dirs if diversity_from is None else diversity_from)])
    result = {"rows": list(rows), "tasks": {}, "es_diversity": div}
    for task in tasks:
        ids = sorted(set.intersection(*(set(r[task]) for r in rows.values())))
        n = min(rows[name][task][i][0] for name in rows for i in ids)
        solved = {name: {i for i in ids if rows[name][task][i][1] > 0} for name in rows}
        per = {}
        for name, recs in rows.items():
            counts = [recs[task][i] for i in ids]
            rates = [c / m for m, c in counts]
            others = set().union(*(s for o, s in solved.items() if o != name))
            per[name] = {"pass_curve": [mean_pass_at_k(counts, k) for k in range(1, n + 1)],
                         "solve_rate_hist": np.histogram(rates, BINS)[0].tolist(),
                         "never_solved": sum(c == 0 for _, c in counts),
                         "always_solved": sum(c == m for m, c in counts),
                         "solved_any": len(solved[name]), "only_this_row": sorted(solved[name] - others)}
        result["tasks"][task] = {"problems": len(ids), "n": n, "rows": per}
    return result


def plot(result: dict, out: Path) -> list[Path]:
    from hyper_es.analyze.figures import save, subplots

    tasks, files = list(result["tasks"]), []
    fig, axes = subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for name, r in result["tasks"][task]["rows"].items():
            ax.plot(range(1, len(r["pass_curve"]) + 1), r["pass_curve"], "o-", ms=3, label=name)
        n = result["tasks"][task]["n"]
        ax.set(title=f"{task} ({result['tasks'][task]['problems']} problems)", xlabel="k", ylabel="Pass@k")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks := [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= n], [str(k) for k in ks])
    axes[0][0].legend(fontsize=7)
    files.append(save(fig, out / "pass_at_k.png"))
    fig, axes = subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rows = result["tasks"][task]["rows"]
        width = 0.09 / max(len(rows), 1)
        for j, (name, r) in enumerate(rows.items()):
            ax.bar(BINS[:-1] + j * width, r["solve_rate_hist"], width=width, align="edge", label=name)
        ax.set(title=task, xlabel="per-problem solve rate (correct / n)", ylabel="problems")
    axes[0][0].legend(fontsize=7)
    files.append(save(fig, out / "solve_rates.png"))
    fig, axes = subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rows = result["tasks"][task]["rows"]
        ax.barh(list(rows), [len(r["only_this_row"]) for r in rows.values()])
        ax.set(title=task, xlabel="problems solved by this row only (any of n samples)")
    files.append(save(fig, out / "unique_solves.png"))
    if result.get("es_diversity"):
        fig, axes = subplots(1, 2, figsize=(9, 3.6), squeeze=False)
        for name, curve in result["es_diversity"].items():
            its = range(1, len(curve) + 1)
            axes[0][0].plot(its, [d["distinct"] for d in curve], "o-", ms=3, label=name)
            axes[0][1].plot(its, [d["solved_any"] for d in curve], "o-", ms=3, label=f"{name}: any member")
            axes[0][1].plot(its, [d["solved_mean"] for d in curve], "x--", ms=3, label=f"{name}: mean member")
        axes[0][0].set(title="ES population", xlabel="iteration", ylabel="distinct answers per prompt")
        axes[0][1].set(title="ES population", xlabel="iteration", ylabel="share of fitness prompts solved")
        axes[0][1].legend(fontsize=7)
        files.append(save(fig, out / "es_diversity.png"))
    return files


def analyze_coverage(run_dirs: list[Path], out: Path, diversity_from: list[Path] | None = None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    result = coverage(run_dirs, diversity_from)
    write_json_atomic(out / "coverage.json", result)
    result["figures"] = [str(p) for p in plot(result, out)]
    return result
