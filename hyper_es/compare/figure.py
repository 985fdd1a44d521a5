"""A comparison's accuracy_cost.png: test accuracy on the trained tasks against generated tokens and wall time per
row and seed, and each arm's GRPO-LoRA candidates on validation beside them."""

from __future__ import annotations

from pathlib import Path

from hyper_es.compare.plan import ComparePlan
from hyper_es.directions.manifest import read_manifest
from hyper_es.io import read_json
from hyper_es.rundir import DIRECTIONS_DIR, EVAL_DIR, FIGURE_FILE
from hyper_es.rows.names import snapshot_step


def curves(seed_dir: Path, arm: str) -> list[tuple[int, float, float]]:
    """(generated training tokens, wall s, validation accuracy) of every candidate of an arm's GRPO run."""
    folder = seed_dir / arm
    m = read_manifest(folder / DIRECTIONS_DIR / "baseline")
    if m is None:
        return []
    tokens = dict(map(tuple, m.get("token_curve") or []))
    out = []
    for f in sorted((folder / EVAL_DIR / "val").glob("baseline*.json")):
        step = m["optimizer_steps"] if f.stem == "baseline" else snapshot_step(f.stem)
        if step in tokens:
            out.append((tokens[step], m["wall_seconds"] * step / m["optimizer_steps"], read_json(f, "")["mean"]))
    return sorted(out)


def figure(plan: ComparePlan, summary: dict, root: Path) -> Path | None:
    if not summary["seeds"]:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    cmap = plt.get_cmap("tab10" if len(plan.rows) <= 10 else "tab20")  # one colour a row
    colors = {label: cmap(i % cmap.N) for i, label in enumerate(plan.rows)}
    markers = "osD^v"
    for i, (seed, e) in enumerate(summary["seeds"].items()):
        for label, r in e["rows"].items():
            for ax, x in ((axes[0][0], r["tokens"]), (axes[0][1], r["wall_s"])):
                if x:
                    ax.scatter(x, r["trained"], color=colors[label], marker=markers[i % 5],
                               label=label if i == 0 else None)
                else:  # nothing spent (the base, a given adapter alone): a level, not a point on a log axis
                    ax.axhline(r["trained"], color=colors[label], linestyle=":", linewidth=1,
                               label=f"{label} (no cost)" if i == 0 else None)
        for (arm, label), style in zip(plan.curves.items(), ("-", "--", ":", "-.")):
            pts = curves(Path(root) / f"seed{seed}", arm)
            for ax, k in ((axes[1][0], 0), (axes[1][1], 1)):
                if pts:
                    ax.plot([p[k] for p in pts], [p[2] for p in pts], style, color=f"C{i}", marker=".",
                            label=f"seed {seed} {label}")
    shapes = {"o": "circle", "s": "square", "D": "diamond", "^": "triangle", "v": "triangle down"}
    key = ", ".join(f"{shapes[markers[i % 5]]} seed {s}" for i, s in enumerate(summary["seeds"]))
    titles = [[f"test, trained tasks: accuracy vs generated tokens\n({key})", f"test: accuracy vs wall seconds\n({key})"],
              ["GRPO-LoRA candidates, validation: vs generated tokens", "validation: vs wall seconds"]]
    for r in range(2):
        for c in range(2):
            ax = axes[r][c]
            ax.set_title(titles[r][c], fontsize=10)
            ax.set_xscale("log")
            ax.tick_params(axis="x", which="minor", labelsize=7, labelrotation=45)  # 2×10³… within a decade
            ax.set_xlabel("generated tokens" if c == 0 else "wall seconds")
            ax.set_ylabel("greedy accuracy")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(root) / FIGURE_FILE
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
