"""The layering is a contract: `lint-imports` (pyproject.toml) keeps the pipeline's layers and forbids circles, and
it fails on an upward import or a circle planted in a temporary copy. `ruff check` passes. Engines live in engine/
only: es/ defines no engine or worker class, and `set_genome` is defined once per backend."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"PATH": str(BIN), "PYTHONPATH": str(cwd)})


def test_the_layers_contract_holds():
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 kept, 0 broken" in res.stdout


@pytest.mark.parametrize("where,line,broken", [
    ("hyper_es/errors.py", "from hyper_es import cli  # planted upward import", "the pipeline's layers"),
    ("hyper_es/engine/hf.py", "from hyper_es.search import run  # planted upward import", "the pipeline's layers"),
    ("hyper_es/directions/jobs.py", "from hyper_es.directions import collect  # planted circle",
     "no import circles"),
])
def test_a_planted_bad_import_fails_the_contract(tmp_path, where, line, broken):
    shutil.copytree(ROOT / "hyper_es", tmp_path / "hyper_es", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / where
    path.write_text(path.read_text() + "\n" + line + "\n")
    res = _lint(tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"{broken}" in res.stdout and "BROKEN" in res.stdout


def test_ruff_check_passes():
    res = subprocess.run([str(BIN / "ruff"), "check", "hyper_es", "bench", "tests", "scripts"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def _defs(folder: Path):
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            yield path, node


def test_engines_and_set_genome_live_in_engine_only():
    es_classes = [n.name for _, n in _defs(ROOT / "hyper_es" / "es") if isinstance(n, ast.ClassDef)]
    assert not [c for c in es_classes if c.endswith(("ES", "Engine", "Worker", "Generator"))], es_classes
    owners = sorted(p.relative_to(ROOT).as_posix() for p, n in _defs(ROOT / "hyper_es")
                    if isinstance(n, ast.FunctionDef) and n.name == "set_genome")
    assert owners == ["hyper_es/engine/hf_resident.py", "hyper_es/engine/vllm_resident.py"]


def test_no_tracked_file_names_an_absolute_path_of_a_machine():
    """Commands in README, docs, benches and recorded artefacts use placeholders (RUN/, ROOT/, CACHE/)."""
    import re

    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    pattern = re.compile(r"(?<![\w.])/(?:work|root|home|tmp)/\w")
    hits = []
    for name in files:
        path = ROOT / name
        if path.suffix in (".safetensors", ".png", ".gguf") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="ignore")
        hits += [f"{name}: {m.group(0)}" for m in pattern.finditer(text)]
    assert not hits, hits[:10]


def _functions(root: Path):
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(ROOT), node


def test_no_function_in_the_package_is_over_80_lines():
    long = [f"{p}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)" for p, n in _functions(ROOT / "hyper_es")
            if n.end_lineno - n.lineno + 1 > 80]
    assert not long, long


def _private_imports(source: str) -> list[str]:
    """Names starting with "_" that `source` imports from hyper_es (its modules' private names)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "hyper_es":
            out += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("hyper_es") and any(
                part.startswith("_") for part in a.name.split("."))]
    return out


def test_the_benchmarks_import_nothing_private_of_the_package():
    assert _private_imports("from hyper_es.fitness.rows import draw_rows, _planted") == ["hyper_es.fitness.rows._planted"]
    found = {str(p.relative_to(ROOT)): _private_imports(p.read_text()) for p in sorted((ROOT / "bench").rglob("*.py"))}
    assert not {k: v for k, v in found.items() if v}, found


def _named_paths(source: str, names: set[str]) -> list[str]:
    """The run-folder names `source` joins into a path as literals (`x / "search"`) instead of from hyper_es.rundir."""
    return [f"{n.lineno}: {n.right.value!r}" for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and isinstance(n.right, ast.Constant)
            and n.right.value in names]


def test_run_folder_names_come_from_rundir():
    import hyper_es.rundir as rundir

    names = {v for k, v in vars(rundir).items() if k.isupper() and isinstance(v, str)}
    assert _named_paths('run / "search" / RESULT_FILE', names) == ["1: 'search'"]  # a planted literal is found
    other = {"models/__init__.py", "architectures/__init__.py", "tasks/builtin.py"}  # a checkpoint's config.json, the
    found = {str(p.relative_to(ROOT)): _named_paths(p.read_text(), names)  # shipped data's manifest.json
             for p in sorted((ROOT / "hyper_es").rglob("*.py"))
             if p.name != "rundir.py" and str(p.relative_to(ROOT / "hyper_es")) not in other}
    assert not {k: v for k, v in found.items() if v}, found
