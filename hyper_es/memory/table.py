"""The memory plan as text: `hyper-es check --plan`'s table, the recipes' memory notes and docs/gpu.md's table."""

from __future__ import annotations

from hyper_es.memory.plan import HEADROOM, Plan
from hyper_es.memory.shapes import GIB


def _gib(n: int) -> str:
    return f"{n / GIB:.1f}"


def plan_text(plan: Plan) -> str:
    """Each stage's peak, whether it fits (with the headroom), and what makes it up."""
    lines = [f"memory plan of {plan.recipe} ({plan.model}) on one {plan.device_bytes / GIB:.0f} GiB {plan.where}, worked out "
             f"from the config's shapes (not measured); each stage in its own process, {HEADROOM / GIB:.0f} GiB "
             f"headroom",
             f"{'stage':<26}{'peak GiB':>10}  fits"]
    for s in plan.stages:
        lines.append(f"{s.name:<26}{_gib(s.peak):>10}  {'yes' if s.peak + HEADROOM <= plan.device_bytes else 'NO'}")
        lines.append("    " + " · ".join(f"{k} {_gib(v)}" for k, v in s.parts.items()))
        lines += [f"    {n}" for n in s.notes]
        lines += [f"    sets {k}: {v:.2f}" for k, v in s.settings.items()]
    return "\n".join(lines)


def recipe_note(plan: Plan) -> list[str]:
    """The recipe's memory note: one comment line per stage (kept equal to the plan by a test)."""
    return [f"#   {s.name}: {_gib(s.peak)} GiB (" + ", ".join(f"{k} {_gib(v)}" for k, v in s.parts.items()) + ")"
            for s in plan.stages]


def plan_markdown(plans: list[Plan]) -> list[str]:
    """One row per recipe and GPU size: each stage's peak in GiB, and whether all fit."""
    names = [s.name for s in plans[0].stages]
    out = ["| recipe | GPU | " + " | ".join(f"{n} (GiB)" for n in names) + " | fits |",
           "|---|---|" + "---:|" * len(names) + "---|"]
    for p in plans:
        fits = "yes" if p.refusal() is None else "no"
        out.append(f"| {p.recipe} | {p.device_bytes / GIB:.0f} GiB | "
                   + " | ".join(_gib(s.peak) for s in p.stages) + f" | {fits} |")
    return out
