"""Directions that exist already (`directions:` in the recipe): PEFT LoRA adapters or a saved DirectionSet, checked
against the recipe's base and copied into RUN/directions/<name>/ with a provenance record (source.json), so every
later stage reads them as it reads trained directions, and the run folder no longer needs the originals."""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path

from hyper_es.directions.manifest import SOURCE, finished_jobs, has_tensors, read_manifest, versions
from hyper_es.directions.set import SET_INDEX, DirectionSet
from hyper_es.directions.sources import read_adapter
from hyper_es.errors import DataError
from hyper_es.io import read_json, write_json_atomic
from hyper_es.recipe import Recipe
from hyper_es.rundir import ADAPTER_CONFIG, ADAPTER_WEIGHTS, DIRECTIONS_DIR

logger = logging.getLogger(__name__)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def given_set(recipe: Recipe) -> DirectionSet:
    """The recipe's `directions:` as a DirectionSet, validated: every tensor in the base with its shape, every
    adapter config naming the recipe's model (or a base in `allow_bases`), no direction all zero."""
    from hyper_es import models

    cfg, base = recipe.directions, recipe.model.name
    file = recipe._path or "<recipe>"  # each error names the recipe file and the field
    if cfg.set is not None:
        ds = DirectionSet.load(recipe.base_dir / cfg.set, validate=False)
        if not models.names_base(ds.base, base) and ds.base not in cfg.allow_bases:
            raise DataError(f"{file}: directions.set ({cfg.set}): a set for the base '{ds.base}', the recipe's model is "
                            f"'{base}'; if that is intended, add '{ds.base}' to directions.allow_bases")
        dirs, where = ds.directions, [f"{file}: directions.set ({cfg.set}) '{d.name}'" for d in ds.directions]
    else:
        dirs, where = [], []
        for i in range(len(cfg.adapters)):
            path, name = cfg.ref(i)
            at = f"{file}: directions.adapters[{i}] ({path})"
            try:
                d = read_adapter(recipe.base_dir / path, name)
            except DataError as exc:
                raise DataError(f"{at}: {exc}") from None
            named = d.meta.get("base")
            if not models.names_base(named, base) and named not in cfg.allow_bases:
                raise DataError(f"{at}: its {ADAPTER_CONFIG} names the base '{named}', the recipe's model is "
                                f"'{base}'; if that is intended, add '{named}' to directions.allow_bases")
            dirs.append(d)
            where.append(at)
    try:
        ds = DirectionSet(base, dirs)  # shapes against the base
    except DataError as exc:
        raise DataError(f"{file}: directions: {exc}") from None
    zero = [at for at, d in zip(where, dirs) if d.is_zero()]
    if zero:
        raise DataError(f"{zero[0]}: ΔW is 0 in every tensor (lora_A or lora_B all zero: an adapter saved before "
                        f"training?), so no coefficient of it can change the model; remove it")
    return ds


def imported_here(run_dir: Path) -> dict[str, Path]:
    """{name: folder} of the directions imported into RUN/directions/ before, with their tensors."""
    return {m["name"]: f for f, m in finished_jobs(run_dir) if "imported" in m and has_tensors(f)}


def import_directions(recipe: Recipe, run_dir: Path) -> list[Path]:
    """Copy the recipe's given directions into RUN/directions/ once (a re-run finds them there); returns their
    folders in the recipe's order."""
    cfg = recipe.directions
    done = imported_here(run_dir)
    index = recipe.base_dir / cfg.set / SET_INDEX if cfg.set is not None else None
    names = ([cfg.ref(i)[1] for i in range(len(cfg.adapters))] if index is None
             else [d["name"] for d in read_json(index, "save the set again")["directions"]] if index.is_file() else None)
    if done and (names is None or set(done) == set(names)):  # imported before: the originals are no longer read
        return [done[n] for n in (names or sorted(done))]
    ds = given_set(recipe)
    origins = []
    for k, d in enumerate(ds.directions):
        if cfg.adapters is not None:  # the PEFT files as they are
            src = recipe.base_dir / cfg.ref(k)[0]
            origins.append({"kind": "peft-adapter", "path": str(src.resolve()),
                            "sha256": {f: _sha256(src / f) for f in (ADAPTER_CONFIG, ADAPTER_WEIGHTS)},
                            "base_named": d.meta.get("base"), **trained_before(src)})
        else:
            origins.append({"kind": "direction-set", "path": str((recipe.base_dir / cfg.set).resolve()),
                            "origin": d.origin})
    return write_imported(ds, run_dir, origins)


def trained_before(folder: Path) -> dict:
    """{"trained": its steps, generated tokens and seconds} for an adapter this toolkit trained (its manifest is
    in the folder): what it cost before this run, which no row is charged but a comparison can show beside them."""
    manifest = read_manifest(folder)
    if manifest is None:
        return {}
    return {"trained": {k: manifest.get(k) for k in ("optimizer_steps", "tokens", "wall_seconds")}}


def write_imported(ds: DirectionSet, run_dir: Path, origins: list[dict]) -> list[Path]:
    """Write each direction of a validated set into RUN/directions/<name>/ with its provenance (`origins[k]`: a
    `peft-adapter` origin copies the adapter's files as they are; any other stores the direction as a one-direction
    saved set); a direction already there is kept. Returns the folders in the set's order."""
    root = Path(run_dir) / DIRECTIONS_DIR
    done = imported_here(run_dir)
    base = {"name": ds.base, "sha256": ds.base_hash}
    for d, origin in zip(ds.directions, origins, strict=True):
        if d.name in done:
            continue
        folder, work = root / d.name, root / f".import-{d.name}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        if origin["kind"] == "peft-adapter":
            for f in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
                shutil.copyfile(Path(origin["path"]) / f, work / f)
        else:
            DirectionSet(ds.base, [d], validate=False).save(work)
        write_json_atomic(work / SOURCE, {"name": d.name, "base": base, "imported": origin, "versions": versions()})
        shutil.rmtree(folder, ignore_errors=True)
        work.replace(folder)
        logger.info("imported direction %s from %s", d.name, origin.get("path", origin["kind"]))
    return [root / n for n in ds.names]
