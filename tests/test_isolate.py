"""`executor.isolate`: each local GRPO job in a child process gives the adapters an in-process run gives; the
driver's memory is back after a child; a child killed mid-job fails its stage in one line and a re-run resumes;
errors cross back; the child dies with its driver (SIGKILL) and stops with it (SIGTERM)."""

import json
import logging
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

import hyper_es as hx
from hyper_es.directions.collect import collect
from hyper_es.distributed import child
from hyper_es.distributed.child import ChildError, run_in_child
from hyper_es.errors import DataError, HyperESError

import child_fns  # noqa: E402  (tests/helpers is on sys.path: conftest)
from recipes import tiny_recipe  # noqa: E402
from test_directions import HELPERS, adapters, write_recipe  # noqa: E402  (tests/ is on sys.path under pytest)

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20


def isolated_recipe(folder: Path, isolate: str) -> hx.Recipe:
    """Two 2-step tiny jobs."""
    return tiny_recipe(folder, {"gradient": {"directions": 2, "steps": 2}, "executor": {"isolate": isolate}},
                       base="dense", write=True)


class Watch(logging.Handler):
    """Keeps the driver's log records; with `kill`, SIGKILLs that stage's child as soon as its pid is logged (it dies
    while it starts)."""

    def __init__(self, kill: str | None = None):
        super().__init__(logging.INFO)
        self.records, self.kill = [], kill

    def emit(self, record):
        self.records.append(record)
        m = re.match(r"(.+): in a child process \(pid (\d+)\)", record.getMessage())
        if m and m[1] == self.kill:
            os.kill(int(m[2]), signal.SIGKILL)

    def __enter__(self):
        log = logging.getLogger("hyper_es")
        self.level = log.level
        log.setLevel(logging.INFO)
        log.addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("hyper_es").removeHandler(self)
        logging.getLogger("hyper_es").setLevel(self.level)


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    folder = tmp_path_factory.mktemp("in-process")
    collect(isolated_recipe(folder, "never"), folder / "run")
    return adapters(folder / "run")


@pytest.fixture(scope="module")
def killed_then_resumed(tmp_path_factory):
    """`isolate: always`: dir-0 finishes in its child, dir-1's child is SIGKILLed; a re-run resumes. Returns
    (the first run's error, the jobs it finished, the children's pids per run, the re-run's log lines, the run
    folder)."""
    folder = tmp_path_factory.mktemp("isolated")
    recipe, run = isolated_recipe(folder, "always"), folder / "run"
    with Watch(kill="job dir-1") as first, pytest.raises(HyperESError) as err:
        collect(recipe, run)
    left = sorted(p.parent.name for p in run.glob("directions/*/manifest.json"))
    with Watch() as second:
        collect(recipe, run)
    return err.value, left, [child_pids(first.records), child_pids(second.records)], \
        [r.getMessage() for r in second.records], run


def child_pids(records) -> dict[str, int]:
    found = (re.match(r"job (\S+): in a child process \(pid (\d+)\)", r.getMessage()) for r in records)
    return {m[1]: int(m[2]) for m in found if m}


@pytest.mark.integration
def test_each_job_runs_in_a_child_and_gives_the_same_adapters(in_process, killed_then_resumed):
    err, left, pids, lines, run = killed_then_resumed
    ran = {"dir-0": pids[0]["dir-0"], "dir-1": pids[1]["dir-1"]}  # the finished jobs' children
    assert len({*ran.values(), pids[0]["dir-1"], os.getpid()}) == 4
    assert not any("finished in" in line for line in lines)  # the job did not log in this process
    assert adapters(run) == in_process  # bitwise


@pytest.mark.integration
def test_a_killed_child_fails_its_stage_in_one_line_and_a_rerun_resumes(killed_then_resumed):
    err, left, pids, lines, run = killed_then_resumed
    msg = str(err)
    assert "\n" not in msg and msg.startswith("job dir-1: ") and "killed by SIGKILL" in msg and "re-running" in msg
    assert left == ["dir-0"]
    assert "job dir-0 already finished (2 steps); skipping" in lines
    assert sorted(pids[0]) == ["dir-0", "dir-1"] and sorted(pids[1]) == ["dir-1"]  # dir-0 was not trained again


def test_the_child_logs_as_the_driver_does_with_its_threads(capfd):
    assert run_in_child("log", child_fns.log_and_getenv, "hello from the child", "OMP_NUM_THREADS", threads=3) == "3"
    assert "hello from the child" in capfd.readouterr().err


MEMORY_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import child_fns
from hyper_es.distributed.child import run_in_child
before = child_fns.rss()
grown_in_child = run_in_child("hold", child_fns.hold, 400)
after_child = child_fns.rss()
child_fns.hold(400)
print(json.dumps([before, grown_in_child, after_child, child_fns.rss()]))
"""


def test_the_drivers_memory_is_back_after_a_child():
    """A function that keeps 400 MB (as an in-process engine keeps its memory) grows the driver when run there, and
    not when run in a child, which grew by as much itself. The driver is a fresh interpreter: a long-lived test process
    may serve the 400 MB from memory its allocator kept from earlier tests, and not grow."""
    helpers = str(Path(__file__).parent / "helpers")
    out = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, helpers], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), helpers])})
    assert out.returncode == 0, out.stderr[-2000:]
    before, grown_in_child, after_child, after_here = json.loads(out.stdout.strip().splitlines()[-1])
    assert grown_in_child > 380 * MB
    assert after_child - before < 40 * MB, (after_child - before) / MB
    assert after_here - after_child > 380 * MB


def test_errors_cross_back():
    with pytest.raises(DataError, match=r"^tasks\[0\]: no rows$"):
        run_in_child("fail", child_fns.fail, "DataError", "tasks[0]: no rows")
    with pytest.raises(ChildError, match=r"(?s)crash failed in its child process .*KeyError: 'missing'"):
        run_in_child("crash", child_fns.crash)


def stage_stub(recipe, run_dir, *args, **kwargs):
    """A stage that reports the recipe it was given (rebuilt from plain data when it crossed to a child)."""
    return {"recipe": recipe.model_dump(mode="json"), "path": recipe._path, "run_dir": Path(run_dir)}


def collect_stub(recipe, run_dir, *, measure=None, **kwargs):
    pickle.dumps(measure)  # the measurement's callback can travel to a child
    return []


@pytest.mark.parametrize("method,stages", [
    ("hyper-es", ["search", "final evaluation and report"]),
    ("es", ["full-parameter ES", "ES → GRPO-LoRA job", "final evaluation and report"])])
def test_the_pipeline_runs_each_stage_in_its_own_process_on_cuda(tmp_path, monkeypatch, method, stages):
    """`isolate: auto` with CUDA: each stage goes to run_in_child, with a function and arguments that pickle, and the
    recipe arrives whole (its fields and its file)."""
    from hyper_es import pipeline
    from hyper_es.recipe import isolate
    from hyper_es.search import es_run, run

    calls = []

    def fake_child(stage, fn, *args, threads=None, **kwargs):
        calls.append(stage)
        fn, args, kwargs = pickle.loads(pickle.dumps((fn, args, kwargs)))  # what a child would get
        return fn(*args, **kwargs)

    monkeypatch.setattr(child, "cuda_present", lambda: True)
    monkeypatch.setattr(isolate, "run_in_child", fake_child)
    monkeypatch.setattr("hyper_es.directions.collect.collect", collect_stub)
    for module, name in ((run, "search"), (es_run, "es_stage"), (es_run, "es_then_grpo"),
                         (pipeline, "evaluate_and_report")):
        monkeypatch.setattr(module, name, stage_stub)
    path = write_recipe(tmp_path)
    data = yaml.safe_load(path.read_text())
    data.update(method=method, es={"then": "grpo"})
    path.write_text(yaml.safe_dump(data))
    recipe = hx.load_recipe(path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run/geometry.json").write_text("{}")
    report = pipeline.run(recipe, tmp_path / "run")
    assert calls == stages
    assert report == {"recipe": recipe.model_dump(mode="json"), "path": path.resolve(), "run_dir": tmp_path / "run"}


@pytest.mark.parametrize("mode,cuda,isolated", [
    ("auto", False, False), ("auto", True, True), ("always", False, True), ("never", True, False)])
def test_isolate_modes(monkeypatch, mode, cuda, isolated):
    monkeypatch.setattr(child, "cuda_present", lambda: cuda)
    assert child.isolating(mode) is isolated


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_the_child_dies_with_its_driver(tmp_path, sig):
    """The driver unwinds on SIGTERM as the CLI does; a SIGKILLed driver takes its child along (PR_SET_PDEATHSIG)."""
    pid_file = tmp_path / "pid"
    code = ("import child_fns; from hyper_es.distributed.child import run_in_child, unwind_on_sigterm; "
            f"unwind_on_sigterm(); run_in_child('sleep', child_fns.sleep_after_writing_pid, {str(pid_file)!r}, 60)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), HELPERS, os.environ.get("PYTHONPATH", "")])}
    driver = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT)
    deadline = time.monotonic() + 30
    while not pid_file.is_file() or not pid_file.read_text():
        assert time.monotonic() < deadline and driver.poll() is None, "the child did not start"
        time.sleep(0.05)
    kid = psutil.Process(int(pid_file.read_text()))
    driver.send_signal(sig)
    assert driver.wait(10) == (-sig if sig == signal.SIGKILL else 128 + sig)
    try:
        kid.wait(10)  # re-parented and reaped, or gone
    except psutil.TimeoutExpired:
        kid.kill()
        pytest.fail(f"the child outlived its driver's {sig.name}")
