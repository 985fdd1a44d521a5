"""The CMA-ES driver apart from any LLM: a known quadratic, budgets, and SIGKILL-and-resume."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from hyper_es.search import Budget, CMASearch
from hyper_es.search.loop import drive

OPT = np.array([0.3, -0.2, 0.8, 0.1, 0.5])


def quadratic(xs, generation):
    return [-float(np.sum((x - OPT) ** 2)) for x in xs]


def run(search, fitness):
    """The one loop (search/loop.py) over a plain fitness function: no record fields beyond the strategy's."""
    return drive(search, lambda xs, g: (fitness(xs, g), {})).state


def test_reaches_the_optimum_of_a_quadratic():
    search = CMASearch(np.zeros(5), 0.3, lower=[-1] * 5, upper=[2] * 5, popsize=8, seed=1,
                       budget=Budget(max_generations=80))
    state = run(search, quadratic)
    assert np.allclose(state.best_x, OPT, atol=1e-3)
    assert state.history[-1]["best"] > state.history[0]["best"]


def test_bounds_and_budgets(tmp_path):
    seen = []
    run(CMASearch(np.zeros(3), 2.0, lower=[-0.5] * 3, upper=[0.5] * 3, popsize=6, seed=0,
                  budget=Budget(max_generations=100, max_evals=30)), lambda xs, g: seen.extend(xs) or quadratic4(xs, g))
    assert len(seen) == 30
    assert all(np.all(x >= -0.5) and np.all(x <= 0.5) for x in seen)


def test_token_budget_counts_the_scan_fitness_and_rescores(tmp_path):
    """search.max_tokens: the scan's tokens first, then each generation's fitness and validation tokens; the
    generation that reaches the budget is the last."""
    budget = Budget(max_generations=50, max_tokens=100, tokens_before=30)
    s = CMASearch(np.zeros(3), 0.3, popsize=4, seed=0, budget=budget, out=tmp_path)
    drive(s, lambda xs, g: (quadratic4(xs, g), {"tokens": 20, "val_tokens": 5}))
    assert s.state.generation == 3  # 30 + 25 + 25 = 80 < 100, 105 >= 100
    assert s.state.stop == {"budget": "max_tokens 100 (105 spent)"}
    again = CMASearch(np.zeros(3), 0.3, popsize=4, seed=0, budget=budget, out=tmp_path)
    assert again.done() and again.state.generation == 3


def test_recommendation_is_the_mean_within_bounds_and_survives_a_resume(tmp_path):
    """search.recommend: mean returns pycma's mean (xfavorite), inside the bounds; a resumed search (replay) has
    the same mean, and on a quadratic it is nearer the optimum than the starting point."""
    make = lambda: CMASearch(np.zeros(5), 0.3, lower=[-1] * 5, upper=[0.6] * 5, popsize=8, seed=2,  # noqa: E731
                             budget=Budget(max_generations=15), out=tmp_path)
    s = make()
    assert np.array_equal(s.recommendation(), np.zeros(5))  # nothing told yet: x0
    run(s, quadratic)
    mean = s.recommendation()
    assert np.all(mean <= 0.6) and np.all(mean >= -1)
    assert np.sum((mean - OPT) ** 2) < np.sum(OPT ** 2) / 4
    assert np.array_equal(make().recommendation(), mean)


CHILD = """
import sys, time, numpy as np
from hyper_es.search import Budget, CMASearch
OPT = np.array([0.3, -0.2, 0.8, 0.1, 0.5])
def f(xs, g):
    time.sleep(0.05)
    return [-float(np.sum((x - OPT) ** 2)) for x in xs]
s = CMASearch(np.zeros(5), 0.3, popsize=6, seed=3, budget=Budget(max_generations=25), out=sys.argv[1])
while not s.done():
    xs = s.ask()
    np.random.rand(3)  # another user of NumPy's global RNG must not shift pycma's stream
    print(s.tell(xs, f(xs, s.state.generation))["generation"], flush=True)
state = s.state
print("FINAL", list(state.best_x), flush=True)
"""


def test_sigkill_and_resume_gives_the_identical_final_genome(tmp_path):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(killed)], stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.strip() == "9":
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    resumed = subprocess.run([sys.executable, "-c", CHILD, str(killed)], capture_output=True, text=True, check=True)
    assert resumed.stdout.splitlines()[0] in ("9", "10")  # continued from the checkpoint, not from scratch
    fresh = subprocess.run([sys.executable, "-c", CHILD, str(clean)], capture_output=True, text=True, check=True)
    assert resumed.stdout.splitlines()[-1] == fresh.stdout.splitlines()[-1]
    log_a = [json.loads(x) for x in (killed / "generations.jsonl").read_text().splitlines()]
    log_b = [json.loads(x) for x in (clean / "generations.jsonl").read_text().splitlines()]
    strip = lambda log: [{k: v for k, v in r.items() if k != "seconds"} for r in log]  # noqa: E731
    assert len(log_a) == 25 and strip(log_a) == strip(log_b)


def test_ask_tell_done_honours_pycma_stop_and_logs_why(tmp_path, caplog):
    """A flat fitness makes pycma's es.stop() fire long before the generation budget; the reason is kept."""
    s = CMASearch(np.zeros(3), 0.3, popsize=4, seed=0, budget=Budget(max_generations=500), out=tmp_path)
    with caplog.at_level("INFO"):
        while not s.done():
            xs = s.ask()
            record = s.tell(xs, [1.0] * len(xs), note="extra")
    assert record["note"] == "extra" and s.state.generation < 500
    assert s.state.stop and "budget" not in s.state.stop
    assert any("search stopped" in r.message for r in caplog.records)
    again = CMASearch(np.zeros(3), 0.3, popsize=4, seed=0, budget=Budget(max_generations=500), out=tmp_path)
    assert again.done() and again.state.stop == s.state.stop and again.state.history == s.state.history


def test_a_flat_generation_on_a_noisy_reward_does_not_end_the_search():
    """All candidates scoring alike once (a hard minibatch) is noise, not convergence: the search goes on to its
    budget; four flat generations in a row end it."""
    s = CMASearch(np.zeros(5), 0.3, popsize=4, seed=0, budget=Budget(max_generations=6))
    run(s, lambda xs, g: [0.0] * len(xs) if g in (0, 2) else quadratic(xs, g))
    assert s.state.generation == 6 and s.state.stop == {"budget": "max_generations 6"}
    flat = CMASearch(np.zeros(3), 0.3, popsize=4, seed=0, budget=Budget(max_generations=50))
    run(flat, lambda xs, g: [0.0] * len(xs))
    assert flat.state.generation == 4 and "flat_fitness" in flat.state.stop


def test_checkpoint_is_json_and_a_planted_pickle_never_runs(tmp_path):
    """The search state is JSON, resumed by replay; a pickle planted in the folder is never loaded."""
    import pickle

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    s = CMASearch(np.zeros(5), 0.3, popsize=6, seed=3, budget=Budget(max_generations=3), out=tmp_path)
    run(s, quadratic)
    (tmp_path / "checkpoint.pkl").write_bytes(pickle.dumps(Payload()))
    json.loads((tmp_path / "checkpoint.json").read_text())
    resumed = CMASearch(np.zeros(5), 0.3, popsize=6, seed=3, budget=Budget(max_generations=5), out=tmp_path)
    assert resumed.state.generation == 3 and not marker.exists()
    run(resumed, quadratic)
    fresh = CMASearch(np.zeros(5), 0.3, popsize=6, seed=3, budget=Budget(max_generations=5))
    run(fresh, quadratic)
    assert resumed.state.best_x == fresh.state.best_x and resumed.state.candidates == fresh.state.candidates


@pytest.mark.parametrize("damage", ["truncated", "other-settings"])
def test_damaged_checkpoint_is_one_clear_error(tmp_path, damage):
    from hyper_es.errors import DataError

    run(CMASearch(np.zeros(4), 0.3, popsize=4, seed=1, budget=Budget(max_generations=2), out=tmp_path), quadratic4)
    path = tmp_path / "checkpoint.json"
    sigma = 0.3
    if damage == "truncated":
        path.write_text(path.read_text()[:-40])
    else:
        sigma = 0.5
    with pytest.raises(DataError, match=r"checkpoint\.json.*delete it") as exc:
        CMASearch(np.zeros(4), sigma, popsize=4, seed=1, budget=Budget(max_generations=4), out=tmp_path)
    assert "\n" not in str(exc.value)


def quadratic4(xs, generation):
    return [-float(np.sum((x - 0.2) ** 2)) for x in xs]
