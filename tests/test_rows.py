"""The row registry (rows/kinds.py): one place that says, per row kind, how its update is built, what it costs and
whether it gets Pass@k; plan_rows, the report and row_update read it."""

import pytest

from hyper_es.errors import DataError
from hyper_es.rows import KINDS, kind_of, row_update


@pytest.mark.parametrize("name,kind", [
    ("base", "base"), ("uniform", "uniform"), ("hyper-es", "hyper-es"), ("hyper-es+prompt", "hyper-es"), ("baseline+es+prompt", "es"),
    ("baseline", "baseline"),
    ("baseline@6", "baseline-snapshot"), ("dir-0", "direction"), ("es", "es"), ("baseline+es", "es"),
    ("hyper-es+es", "es"), ("es+grpo", "es-grpo"), ("baseline+es+grpo", "es-grpo"), ("search-start", "search-start"),
    ("grad-fit", "grad-fit"),
])
def test_a_row_name_has_one_kind(name, kind):
    assert kind_of(name).name == kind


def test_the_compared_rows_get_pass_k_and_the_curve_rows_do_not():
    assert {k for k, v in KINDS.items() if v.pass_k} == {"base", "baseline", "es", "es-grpo", "hyper-es", "grad-fit"}


def test_the_base_row_is_no_update_and_the_uniform_row_is_one_clear_error(tmp_path):
    assert row_update(tmp_path, "base", None) == {}
    with pytest.raises(DataError, match="row 'uniform' \\(uniform\\) has no single update"):
        row_update(tmp_path, "uniform", None)


def test_a_row_kind_missing_from_the_registry_fails_where_the_row_is_made(monkeypatch):
    """Every row a run plans is made as a `Row`, which refuses a kind the registry lacks: dropping a kind from the
    registry (or planning a new kind without registering it) fails here, not later in the report's cost."""
    from hyper_es.evaluate import final

    assert all(final.Row("x", k).pass_k == KINDS[k].pass_k for k in KINDS)
    for kind in ("scaled", "baseline-snapshot", "es-grpo"):
        monkeypatch.setattr(final, "KINDS", {k: v for k, v in KINDS.items() if k != kind})
        with pytest.raises(KeyError, match=f"kind '{kind}' is not in the row registry"):
            final.Row(kind, kind)


def test_row_names_are_built_and_read_back_by_one_grammar():
    from hyper_es.rows import names

    assert [names.snapshot_step(names.snapshot(s)) for s in (0, 3, 27)] == [0, 3, 27]
    assert names.snapshot_step("baseline") is None and names.snapshot_step("baseline@x") is None
    assert [names.es_row(s) for s in ("base", "baseline", "hyper-es")] == ["es", "baseline+es", "hyper-es+es"]
    for start in ("base", "baseline", "hyper-es"):
        es, grpo = names.es_row(start), names.es_grpo_row(start)
        assert kind_of(es).name == "es" and kind_of(grpo).name == "es-grpo"
        assert kind_of(names.prompted(es)).name == "es" and names.weights_of(names.prompted(grpo)) == grpo
    assert kind_of(names.snapshot(15)).name == "baseline-snapshot" and names.baseline_candidate(names.snapshot(15))
    assert not names.baseline_candidate("dir-0") and names.baseline_candidate("base")
