"""Scale-out on a real local Ray cluster (2 CPU workers), tiny model: the same results as one machine."""

import os
import subprocess
import sys

import pytest

import hyper_es as hx
from hyper_es.directions.collect import collect

from test_directions import HELPERS, adapters, write_recipe  # noqa: E402  (tests/ is on sys.path under pytest)

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


def test_collect_on_ray_gives_the_local_adapters_bitwise(cluster, tmp_path):
    """K=2 gradient jobs as Ray tasks write the same adapter bytes as the local executor; a re-run skips them."""
    (tmp_path / "a").mkdir()
    local = hx.load_recipe(write_recipe(tmp_path / "a", directions=2, steps=2))
    on_ray = hx.recipe.recipe_from_dict({**local.model_dump(mode="json"), "executor": {"kind": "ray"}},
                                        tmp_path / "b" / "recipe.yaml")
    collect(local, tmp_path / "a" / "run")
    collect(on_ray, tmp_path / "b" / "run")
    assert adapters(tmp_path / "b" / "run") == adapters(tmp_path / "a" / "run") and len(adapters(tmp_path / "a" / "run")) == 2
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "b" / "run").glob("directions/*/manifest.json")}
    collect(on_ray, tmp_path / "b" / "run")
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_unreachable_address_is_one_clear_line(tmp_path):
    """In a fresh process (no Ray driver yet): `hyper-es collect` with an address nothing listens on fails fast
    with one line naming the field and the address."""
    import yaml

    path = write_recipe(tmp_path, directions=1, steps=1)
    data = yaml.safe_load(path.read_text())
    data["executor"] = {"kind": "ray", "address": "127.0.0.1:9"}
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "PYTHONPATH": HELPERS}  # the recipe's user reward
    res = subprocess.run([sys.executable, "-m", "hyper_es", "collect", str(path), "--out", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=120, env=env)
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error")]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "executor.address: cannot reach a Ray cluster at 127.0.0.1:9" in lines[0]
