"""The results directory: ``results.zarr`` (xarray in a Zarr store, one region per
chunk), ``sweep.json`` (the effective spec and member table) and one completion marker per
chunk; creating or reopening it, its status, and reading it back."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ._plan import _fast_plan, _pilot_dt
from ._spec import SweepError, SweepSpec, _spec_difference, _spec_from_json, coord_name

STORE = "results.zarr"
SPEC_FILE = "sweep.json"
CHUNK_DIR = "chunks"

#: per process: the saved spec of a results directory, read again when sweep.json changes
_SPEC_CACHE: dict[str, tuple[float, SweepSpec, dict]] = {}


def _load_saved(out: Path) -> tuple[SweepSpec, dict]:
    f = out / SPEC_FILE
    key = str(f.resolve())
    mtime = f.stat().st_mtime
    hit = _SPEC_CACHE.get(key)
    if hit is None or hit[0] != mtime:
        saved = json.loads(f.read_text(encoding="utf-8"))
        hit = (mtime, _spec_from_json(saved["spec"]), saved)
        _SPEC_CACHE[key] = hit
    return hit[1], hit[2]


def _result_vars(T: int, N: int) -> dict[str, tuple[tuple[str, ...], Any, Any, str]]:
    """name -> (dims, dtype, fill, long name) of every per-member result variable."""
    f8 = np.float64
    return {
        "status": (("member",), np.int32, -1, "member status: 0 success, -1 not run, 100 invalid configuration, "
                   "else a diffrax RESULTS code (attribute status_names)"),
        "t_final": (("member",), f8, np.nan, "time reached"),
        "x_final": (("member", "component"), f8, np.nan, "state at t_final (paper ordering)"),
        "gc": (("member", "time", "xyz"), f8, np.nan, "geometric centre at the save times (spatial frame)"),
        "energy": (("member", "time"), f8, np.nan, "total energy T + V at the save times"),
        "distance": (("member",), f8, np.nan, "distance rolled: |GC(t_final) - GC(t0)| in the e1-e2 plane"),
        "path_length": (("member",), f8, np.nan, "length of the GC path through the save times"),
        "heading": (("member",), f8, np.nan, "final heading: direction of the GC velocity at t_final, atan2(v2, v1) [rad]"),
        "num_steps": (("member",), np.int64, -1, "solver steps (attempted)"),
        "num_accepted_steps": (("member",), np.int64, -1, "accepted steps"),
        "num_rejected_steps": (("member",), np.int64, -1, "rejected steps"),
        "error_estimate": (("member",), f8, np.nan, "modes lockstep/shared/fixed: max scaled embedded error estimate"),
        "refined": (("member",), np.int8, 0, "1: re-solved in adaptive mode"),
    }


def _done_chunks(out: Path) -> set[int]:
    d = out / CHUNK_DIR
    if not d.is_dir():
        return set()
    return {int(p.stem[1:]) for p in d.glob("c*.json") if p.stem[1:].isdigit()}


def _init_store(out: Path, spec: SweepSpec, table: dict[str, np.ndarray]) -> None:
    import dask.array as da
    import xarray as xr

    from ...batch import STATUS_NAMES
    from ..config import build_from_mapping, dump_toml

    base_cfg = build_from_mapping(spec.base)
    T, N = len(base_cfg.ts), int(base_cfg.model.state_size)
    n, ch = spec.size, spec.chunk
    data = {}
    encoding = {}
    for name, (dims, dt, fill, long_name) in _result_vars(T, N).items():
        shape = tuple({"member": n, "component": N, "time": T, "xyz": 3}[d] for d in dims)
        chunks = (ch,) + shape[1:]
        arr = np.full(shape, fill, dtype=dt) if name == "status" else da.full(shape, fill, dtype=dt, chunks=chunks)
        data[name] = (dims, arr, {"long_name": long_name})
        encoding[name] = {"chunks": chunks}
    coords = {
        "member": ("member", np.arange(n, dtype=np.int64), {"long_name": "member index (grid point first, random sample fastest)"}),
        "time": ("time", np.asarray(base_cfg.ts), {"long_name": "save time"}),
        "component": ("component", np.asarray(base_cfg.model.state_labels(), dtype="U16"), {"long_name": "state label"}),
        "xyz": ("xyz", np.asarray(["x", "y", "z"], dtype="U1")),
    }
    for p, v in table.items():
        coords[coord_name(p)] = ("member", np.asarray(v, dtype=np.float64), {"path": p, "swept": "grid" if p in dict(spec.grid) else "random"})
        encoding[coord_name(p)] = {"chunks": (ch,)}
    from ... import __version__

    attrs = {
        "title": f"rollball_jax sweep {spec.name!r}",
        "rollball_jax_version": __version__,
        "sweep_name": spec.name, "description": spec.description, "sweep_digest": spec.digest(),
        "swept_paths": json.dumps(spec.paths), "grid_paths": json.dumps([p for p, _ in spec.grid]),
        "grid_shape": json.dumps([len(v) for _, v in spec.grid]), "n_random": spec.n_random,
        "mode": spec.mode, "chunk": spec.chunk, "group_size": spec.group_size,
        "dt": -1.0 if spec.dt is None else float(spec.dt),
        "model_type": base_cfg.model_type, "solver": base_cfg.solver, "rtol": base_cfg.rtol, "atol": base_cfg.atol,
        "base_config_toml": dump_toml(spec.base),
        "status_names": json.dumps({str(k): v for k, v in STATUS_NAMES.items()}),
    }
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    tmp = out / f".{STORE}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(tmp, mode="w", compute=False, encoding=encoding, zarr_format=2, consolidated=True)
    target = out / STORE
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)


def _prepare(out: Path, spec: SweepSpec, overwrite: bool) -> tuple[SweepSpec, dict]:
    """Create or reopen the results directory; returns the effective spec and table."""
    from ..output import write_json

    out.mkdir(parents=True, exist_ok=True)
    spec_file, store = out / SPEC_FILE, out / STORE
    if spec_file.exists() and store.exists() and not overwrite:
        saved = json.loads(spec_file.read_text(encoding="utf-8"))
        stored = _spec_from_json(saved["spec"])
        requested = spec if spec.dt is not None or spec.mode != "fixed" else dataclasses.replace(spec, dt=stored.dt)
        if stored.digest() != requested.digest():
            raise SweepError(
                f"{out} holds a different sweep ({saved['spec']['name']!r}, digest {stored.digest()[:12]}): "
                f"{_spec_difference(stored, requested)}; use another --out, or --overwrite to discard it"
            )
        return stored, saved
    if overwrite:
        for p in (spec_file, store, out / CHUNK_DIR):
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    if spec_file.exists():
        spec_file.unlink()
    if (out / CHUNK_DIR).exists():
        shutil.rmtree(out / CHUNK_DIR)
    table = spec.table()
    if spec.build == "fast":
        _fast_plan(spec, table)  # raises SweepError if a path cannot be assembled
    if spec.mode == "fixed" and spec.dt is None:
        spec = dataclasses.replace(spec, dt=_pilot_dt(spec, table))
    _init_store(out, spec, table)
    saved = {"spec": spec.to_json(), "digest": spec.digest(), "table": {p: v.tolist() for p, v in table.items()},
             "n_members": spec.size, "n_chunks": spec.n_chunks, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_json(spec_file, saved)
    return spec, saved


def sweep_status(out: str | os.PathLike) -> dict:
    """Counts of a results directory: members, chunks done, succeeded/failed/invalid."""
    out = Path(out)
    if not (out / SPEC_FILE).exists():
        raise SweepError(f"{out}: not a sweep results directory (no {SPEC_FILE})")
    saved = json.loads((out / SPEC_FILE).read_text(encoding="utf-8"))
    done = _done_chunks(out)
    ok = failed = invalid = 0
    for c in done:
        m = json.loads((out / CHUNK_DIR / f"c{c:06d}.json").read_text(encoding="utf-8"))
        ok += m["succeeded"]
        failed += m["failed"]
        invalid += len(m["invalid"])
    return {
        "name": saved["spec"]["name"], "members": saved["n_members"], "chunks": saved["n_chunks"],
        "chunks_done": len(done), "complete": len(done) == saved["n_chunks"],
        "succeeded": ok, "failed": failed, "invalid": invalid, "mode": saved["spec"]["run"]["mode"],
    }


def open_sweep(out: str | os.PathLike, *, load: bool = True):
    """The results of a sweep as an ``xarray.Dataset`` (dimension ``member``; swept
    parameters as coordinates along it, named by :func:`coord_name`, with the key path in
    their ``path`` attribute). Members of chunks not yet done have ``status = -1`` and
    NaN results. ``invalid_messages`` (attribute, JSON) maps member → configuration error.
    """
    import xarray as xr

    out = Path(out)
    store = out / STORE if (out / STORE).exists() else out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_zarr(store, consolidated=True)
    if load:
        ds = ds.load()
    done = _done_chunks(out) if (out / CHUNK_DIR).exists() else set()
    chunk = int(ds.attrs.get("chunk", 1))
    is_done = np.isin(np.asarray(ds["member"]) // chunk, sorted(done))
    ds["status"] = ds["status"].where(is_done, -1)
    for name, var in ds.data_vars.items():
        if name != "status" and var.dtype.kind == "f":
            ds[name] = var.where(xr.DataArray(is_done, dims="member"))
    messages = {}
    for c in done:
        with contextlib.suppress(OSError, ValueError):
            messages.update(json.loads((out / CHUNK_DIR / f"c{c:06d}.json").read_text(encoding="utf-8"))["invalid"])
    ds.attrs["invalid_messages"] = json.dumps(messages)
    return ds
