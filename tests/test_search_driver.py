"""The CMA-ES driver apart from any LLM: a known quadratic, budgets, and SIGKILL-and-resume."""

import json
import os
import signal
import subprocess
import sys

import numpy as np

from hyper_es.search import Budget, CMASearch

OPT = np.array([0.3, -0.2, 0.8, 0.1, 0.5])


def quadratic(xs, generation):
    return [-float(np.sum((x - OPT) ** 2)) for x in xs]


def test_reaches_the_optimum_of_a_quadratic():
    search = CMASearch(np.zeros(5), 0.3, lower=[-1] * 5, upper=[2] * 5, popsize=8, seed=1,
                       budget=Budget(max_generations=80))
    state = search.run(quadratic)
    assert np.allclose(state.best_x, OPT, atol=1e-3)
    assert state.history[-1]["best"] > state.history[0]["best"]


def test_bounds_and_budgets(tmp_path):
    seen = []
    CMASearch(np.zeros(3), 2.0, lower=[-0.5] * 3, upper=[0.5] * 3, popsize=6, seed=0,
              budget=Budget(max_generations=100, max_evals=30)).run(lambda xs, g: seen.extend(xs) or [0.0] * len(xs))
    assert len(seen) == 30
    assert all(np.all(x >= -0.5) and np.all(x <= 0.5) for x in seen)


CHILD = """
import sys, time, numpy as np
from hyper_es.search import Budget, CMASearch
OPT = np.array([0.3, -0.2, 0.8, 0.1, 0.5])
def f(xs, g):
    time.sleep(0.05)
    return [-float(np.sum((x - OPT) ** 2)) for x in xs]
def report(r, xs, scores):
    print(r["generation"], flush=True)
s = CMASearch(np.zeros(5), 0.3, popsize=6, seed=3, budget=Budget(max_generations=25), out=sys.argv[1])
state = s.run(f, report)
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
