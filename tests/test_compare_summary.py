"""A comparison's summary (hyper_es/compare/) with the re-decision's plan (bench/decide_summary.py) on small run
folders written here: each difference is the mean of the paired per-problem differences, rows resolve across arms,
and the goal waits for every control and seed. Then `hyper-es report` over the committed decide2 artefacts."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from decide_summary import PLAN  # noqa: E402

from hyper_es.compare import markdown as md, render, write_plan  # noqa: E402
from hyper_es.compare.summary import partial, summarize  # noqa: E402

IDS = [str(i) for i in range(10)]


def _steps(name: str) -> int:
    return int(name.partition("@")[2] or 27)  # baseline@N: step N; the final adapter: 27


def write_stage(folder: Path, rows: dict[str, list[int]], best: str) -> None:
    (folder / "eval").mkdir(parents=True)
    report_rows = []
    for name, greedy in rows.items():
        res = {"chain_sum": {"greedy": sum(greedy) / len(greedy), "problems": len(greedy),
                             "records": {"ids": IDS, "greedy": greedy}}}
        (folder / "eval" / f"{name}.json").write_text(json.dumps({"name": name, "kind": "x", "steps": 1,
                                                                  "results": res}))
        report_rows.append({"name": name, "optimizer_steps": _steps(name) if "baseline" in name else 24, "train_tokens": 100,
                            "search_tokens": 0, "select_tokens": 5, "tokens": 105, "wall_s": 1.0,
                            "results": {"chain_sum": {"greedy": res["chain_sum"]["greedy"]}}})
    steps = max((_steps(n) for n in rows if n.startswith("baseline")), default=27)
    job = folder / "directions" / "baseline"
    job.mkdir(parents=True)
    (job / "manifest.json").write_text(json.dumps({  # 10 tokens and 2 s a step
        "name": "baseline", "job": "baseline", "base": {"name": "m", "sha256": "0"}, "optimizer_steps": steps,
        "completions": 4 * steps, "tokens": 10 * steps, "reward_curve": [], "wall_seconds": 2.0 * steps,
        "token_curve": [[s, 10 * s] for s in range(1, steps + 1)]}))
    (folder / "eval" / "val").mkdir()
    for name in (n for n in rows if n == "base" or n.startswith("baseline")):  # each candidate's validation scoring
        (folder / "eval" / "val" / f"{name}.json").write_text(json.dumps({"mean": 0.1, "tokens": 7, "seconds": 0.5}))
    (folder / "report.json").write_text(json.dumps({
        "rows": report_rows, "tasks": ["chain_sum"], "baseline_best": {"name": best},
        "paired": {"pooled": {"trained": ["chain_sum"]}}}))


def test_summary_pairs_rows_across_stages(tmp_path):
    seed = tmp_path / "seed0"
    write_stage(seed / "main", {"base": [0] * 10, "baseline": [1] * 3 + [0] * 7, "baseline@3": [1] * 4 + [0] * 6,
                                "scaled": [1] * 5 + [0] * 5, "hyper-es": [1] * 6 + [0] * 4}, best="baseline@3")
    write_stage(seed / "equal", {"base": [0] * 10, "baseline@90": [1] * 7 + [0] * 3}, best="baseline@90")
    fit = {"scale": 0.5, "cosine": 0.9, "unexplained": 0.19, "norm": 1.0, "reference_norm": 2.0}
    (seed / "main" / "scale_fit.json").write_text(json.dumps({"reference": "baseline", "block_size": 2, "rows": {
        "hyper-es": {**fit, "blocks": {"L0-1": {**fit, "scale": 0.4}, "other": {**fit, "scale": None}}}}}))
    s = summarize(PLAN, tmp_path, [0, 1, 2])
    rows = s["seeds"][0]["rows"]
    assert rows["baseline-best"]["name"] == "baseline@3" and rows["grpo-equal-compute"]["name"] == "baseline@90"
    # an early stop costs the run up to its step and the scoring of every candidate (base, baseline@3, baseline)
    assert (rows["baseline-best"]["train_tokens"], rows["baseline-best"]["select_tokens"]) == (30, 21)
    assert rows["baseline-best"]["tokens"] == 51 and rows["baseline-best"]["wall_s"] == pytest.approx(6.0 + 1.5)
    assert rows["baseline"]["select_tokens"] == 5  # the final adapter's own row as the report has it
    assert "hyper-es-difficulty" not in rows
    vs = s["seeds"][0]["vs"]
    assert vs["hyper-es - scaled"]["trained"]["diff"] == pytest.approx(0.1)
    assert vs["hyper-es - grpo-equal-compute"]["trained"]["diff"] == pytest.approx(-0.1)
    assert s["pooled"]["hyper-es - baseline-best"]["trained"]["seed_mean"] == pytest.approx(0.2)
    # seeds ahead by point estimate, and seeds whose own CI is above 0 (6 of 10 over the base: the CI is too)
    assert s["pooled"]["hyper-es - base"]["trained"]["seeds_ci_above_0"] == 1
    g = s["goal"]["hyper-es"]
    assert g["strongest_control"] == "grpo-equal-compute" and g["status"] == "incomplete"
    assert (g["seeds_ahead"], g["seeds_ci_above_0"]) == (0, 0)
    assert g["steps_ratio_max"] == pytest.approx(24 / 27) and g["steps_within_goal_ratio"]
    assert s["goal"]["hyper-es-difficulty"]["status"] == "incomplete"
    text = md.markdown(PLAN, s, tmp_path)
    assert "| hyper-es - scaled | +10.0 [" in text and "**incomplete**" in text
    assert "| 0 | main | 0.500 | 0.900 | 19.0% | L0-1 0.40 |" in text  # the scale fit, blocks without one left out
    write_plan(tmp_path, PLAN)
    render(tmp_path, [0, 1, 2])
    assert (tmp_path / "accuracy_cost.png").stat().st_size > 0 and (tmp_path / "summary.json").is_file()


def test_given_adapters_own_training_is_shown_beside_the_rows_not_charged(tmp_path):
    """Adapters imported with the cost of their training (a manifest beside them) are charged to no row; the summary
    shows what charging them would add."""
    main = tmp_path / "seed0" / "main"
    write_stage(main, {"base": [0] * 10, "scaled": [1] * 5 + [0] * 5, "hyper-es": [1] * 6 + [0] * 4}, best="base")
    for name, tokens in (("letters", 400), ("add_sub", 600)):
        (main / "directions" / name).mkdir(parents=True)
        (main / "directions" / name / "source.json").write_text(json.dumps({
            "name": name, "base": {"name": "m", "sha256": "0"}, "imported": {
                "kind": "peft-adapter", "trained": {"optimizer_steps": 27, "tokens": tokens, "wall_seconds": 10.0}}}))
    s = summarize(PLAN, tmp_path, [0])
    assert s["seeds"][0]["adapters_trained"] == {"adapters": 2, "steps": 54, "tokens": 1000, "seconds": 20.0}
    assert s["seeds"][0]["rows"]["hyper-es"]["train_tokens"] == 100  # as the report charged it: not the adapters
    assert "seed 0: 2 adapters, 54 steps, 1,000 tokens, 20 s" in md.markdown(PLAN, s, tmp_path)


def test_a_stage_still_evaluating_gives_its_rows_so_far(tmp_path):
    main = tmp_path / "seed0" / "main"
    write_stage(main, {"base": [0] * 10, "scaled": [1] * 5 + [0] * 5, "hyper-es": [1] * 6 + [0] * 4}, best="base")
    (main / "report.json").unlink()  # the final evaluation has not finished: no report yet
    part = partial(PLAN, tmp_path, [0, 1])
    assert list(part) == [0] and list(part[0]) == ["main"] and part[0]["main"]["rows"]["scaled"] == {"chain_sum": 0.5}
    assert part[0]["main"]["vs"]["scaled"]["trained"]["diff"] == pytest.approx(0.1)
    assert part[0]["main"]["vs"]["base"]["trained"]["diff"] == pytest.approx(0.6)
    text = "\n".join(md._partial(PLAN, part))
    assert "main stage still evaluating" in text and "| scaled | +10.0 [" in text
    difficulty = tmp_path / "seed0" / "difficulty"  # the difficulty stage, evaluating, beside a finished main
    write_stage(difficulty, {"base": [0] * 10, "scaled": [1] * 5 + [0] * 5, "hyper-es": [1] * 8 + [0] * 2}, best="base")
    (difficulty / "report.json").unlink()
    assert partial(PLAN, tmp_path, [0])[0]["difficulty"]["vs"]["scaled"]["trained"]["diff"] == pytest.approx(0.3)


def test_coevolution_arms_pair_with_the_parameter_only_row_and_the_base(tmp_path):
    """Issue 22's arms: prompt-only is the coevolve-prompt stage's hyper-es+prompt row, coevolution the
    coevolve-both stage's, and its own-prompt twin that stage's hyper-es row; each is paired per problem."""
    seed = tmp_path / "seed0"
    write_stage(seed / "main", {"base": [0] * 10, "baseline": [1] * 3 + [0] * 7, "scaled": [1] * 5 + [0] * 5,
                                "hyper-es": [1] * 6 + [0] * 4}, best="baseline")
    write_stage(seed / "coevolve-prompt", {"hyper-es+prompt": [1] * 2 + [0] * 8}, best="baseline")
    write_stage(seed / "coevolve-both", {"hyper-es": [1] * 5 + [0] * 5, "hyper-es+prompt": [1] * 8 + [0] * 2},
                best="baseline")
    s = summarize(PLAN, tmp_path, [0])
    rows = s["seeds"][0]["rows"]
    assert {k: rows[k]["trained"] for k in ("prompt-only", "coevolution", "coevolution-own-prompt")} == \
        {"prompt-only": 0.2, "coevolution": 0.8, "coevolution-own-prompt": 0.5}
    vs = {k: v["trained"]["diff"] for k, v in s["seeds"][0]["vs"].items()}
    assert vs["coevolution - hyper-es"] == pytest.approx(0.2)
    assert vs["coevolution - prompt-only"] == pytest.approx(0.6)
    assert vs["prompt-only - hyper-es"] == pytest.approx(-0.4)
    assert vs["coevolution - coevolution-own-prompt"] == pytest.approx(0.3)
    assert vs["coevolution - base"] == pytest.approx(0.8) and vs["prompt-only - base"] == pytest.approx(0.2)
    assert "| coevolution - hyper-es | +20.0 [" in md.markdown(PLAN, s, tmp_path)


def test_the_chosen_prompts_are_shown_as_served(tmp_path):
    """Each arm's co-evolved prompt (its stage's search/prompt.json) in full: system, few-shot turns, user template
    with its field left in place and its escaped braces as they are sent."""
    seed = tmp_path / "seed0"
    write_stage(seed / "main", {"base": [0] * 10, "hyper-es": [1] * 6 + [0] * 4}, best="base")
    write_stage(seed / "coevolve-both", {"hyper-es": [1] * 5 + [0] * 5, "hyper-es+prompt": [1] * 8 + [0] * 2},
                best="base")
    exported = {"system": "Be careful.", "chat": True, "shots": [{"user": "1+1?\nBoxed.", "assistant": "2"}],
                "template": "{question}\nGive the final answer in \\boxed{{}}."}
    genes = {"system": 1, "template": 0, "format": 0, "shots": [7]}
    (seed / "coevolve-both" / "search").mkdir()
    (seed / "coevolve-both" / "search" / "prompt.json").write_text(json.dumps(
        {"genes": {"chain_sum": genes}, "prompt": {}, "exported": {"chain_sum": exported}}))
    s = summarize(PLAN, tmp_path, [0])
    assert set(s["seeds"][0]["prompts"]) == {"coevolution"}
    text = md.markdown(PLAN, s, tmp_path)
    assert f"Seed 0, coevolution, task chain_sum (genes {json.dumps(genes)}):" in text
    assert "[system] Be careful.\n[user] 1+1?\nBoxed.\n[assistant] 2\n" \
           "[user] {question}\nGive the final answer in \\boxed{}.\n```" in text


def test_an_early_stop_at_the_final_adapter_still_pays_for_choosing_it(tmp_path):
    seed = tmp_path / "seed0"
    write_stage(seed / "main", {"base": [0] * 10, "baseline@3": [1] * 2 + [0] * 8, "baseline": [1] * 4 + [0] * 6,
                                "hyper-es": [1] * 5 + [0] * 5}, best="baseline")
    rows = summarize(PLAN, tmp_path, [0])["seeds"][0]["rows"]
    best = rows["baseline-best"]
    assert best["name"] == "baseline" and (best["train_tokens"], best["select_tokens"], best["tokens"]) == (270, 21, 291)
    assert best["wall_s"] == pytest.approx(54.0 + 1.5) and rows["baseline"]["select_tokens"] == 5


def test_the_search_is_paired_with_its_own_start_and_the_start_with_each_control(tmp_path):
    """What the search adds over its start (the scanned scale of x0, no search), and whether the start alone
    already does what a control does."""
    seed = tmp_path / "seed0"
    write_stage(seed / "main", {"base": [0] * 10, "baseline": [1] * 3 + [0] * 7, "scaled": [1] * 5 + [0] * 5},
                best="baseline")
    write_stage(seed / "difficulty", {"base": [0] * 10, "search-start": [1] * 6 + [0] * 4,
                                      "hyper-es": [1] * 7 + [0] * 3}, best="base")
    vs = summarize(PLAN, tmp_path, [0])["seeds"][0]["vs"]
    assert vs["hyper-es-difficulty - hyper-es-difficulty-start"]["trained"]["diff"] == pytest.approx(0.1)
    assert vs["hyper-es-difficulty-start - scaled"]["trained"]["diff"] == pytest.approx(0.1)
    assert vs["hyper-es-difficulty-start - baseline-best"]["trained"]["diff"] == pytest.approx(0.3)
    assert not any(k.startswith("hyper-es - ") or k.startswith("hyper-es-start") for k in vs)  # no main search row


DECIDE2 = Path(__file__).resolve().parents[1] / "bench" / "results" / "decide2"


def test_report_over_the_committed_decide2_artefacts_reproduces_its_summary(tmp_path, cli):
    """`hyper-es report ROOT` over a copy of the committed re-decision: summary.json exactly as committed, and every
    line of summary.md (the figure is not redrawn)."""
    import shutil

    root = tmp_path / "decide2"
    shutil.copytree(DECIDE2, root, ignore=shutil.ignore_patterns("summary.*", "accuracy_cost.png"))
    shutil.copy(DECIDE2 / "accuracy_cost.png", root)  # so the summary links it as the committed one does
    result = cli("report", root, "--no-figure")
    assert result.exit_code == 0, result.stderr
    assert json.loads((root / "summary.json").read_text()) == json.loads((DECIDE2 / "summary.json").read_text())
    assert (root / "summary.md").read_text() == (DECIDE2 / "summary.md").read_text()
    assert result.stdout.startswith("# Re-decision: Hyper-ES against the strongest simple controls")


def test_report_refuses_a_folder_that_is_not_a_comparison_in_one_line(tmp_path, cli):
    result = cli("report", tmp_path)
    assert result.exit_code == 2 and result.stderr.count("error:") == 1 and "no compare.json" in result.stderr
    (tmp_path / "compare.json").write_text(json.dumps({**PLAN.model_dump(mode="json"), "methods": ["nope"]}))
    result = cli("report", tmp_path)
    assert result.exit_code == 2 and result.stderr.count("error:") == 1
    assert "compare.json" in result.stderr and "labels ['nope'] are not in rows" in result.stderr
