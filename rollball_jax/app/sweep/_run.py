"""Running a sweep: one chunk (build, solve as a batch, write its region and marker),
and the driver over the pending chunks, in this process or on a Dask cluster."""

from __future__ import annotations

import os
import socket
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ConfigError
from ._plan import _batched_mask, _fast_plan
from ._spec import SweepError, SweepSpec
from ._store import CHUNK_DIR, STORE, _done_chunks, _load_saved, _prepare, _result_vars, sweep_status


#: Seconds to sleep after each chunk (environment; for tests and demonstrations of resuming).
THROTTLE_ENV = "ROLLBALL_SWEEP_THROTTLE"


_OBS_FN: dict = {}


def _observables(models, xs, contexts, x_final):
    """gc (B, T, 3), energy (B, T), heading at the end (B,) for a batch of one structure."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    fn = _OBS_FN.get("f")
    if fn is None:
        @eqx.filter_jit
        def fn(models, xs, contexts, x_final):
            def one(m, x_t, ctx, xf):
                obs = jax.vmap(lambda x: m.observables(x, **ctx))(x_t)
                end = m.observables(xf, **ctx)
                w = end["omega_spatial"]
                v = m.radius * jnp.stack([w[1], -w[0]])  # GC velocity ω × r e3 (rolling)
                return obs["gc"], obs["energy"], jnp.arctan2(v[1], v[0])

            return jax.vmap(one)(models, xs, contexts, x_final)

        _OBS_FN["f"] = fn
    gc, energy, heading = fn(models, jnp.asarray(xs), contexts, jnp.asarray(x_final))
    return np.asarray(gc), np.asarray(energy), np.asarray(heading)


def _solve_into(res, members, models, controls, x0s, base_cfg, spec, table, z_a=0.0):
    """Solve a padded same-structure batch and write members' results into ``res``.
    ``z_a``: a disk's initial GC position, one for all or one per member (the group took
    its first member's for all before: a sweep over a disk's ``initial.z`` wrote wrong GC
    positions)."""
    import jax

    from ...batch import simulate_batch
    from ..config import make_solver

    mask = _batched_mask(spec, table) if spec.mode != "adaptive" else None
    if mask is not None and len(mask) != len(jax.tree.leaves((models, controls))):
        mask = None
    r = simulate_batch(
        models, controls, x0s, base_cfg.t_span, ts=base_cfg.ts, strategy=spec.strategy(),
        solver=make_solver(base_cfg.solver), rtol=base_cfg.rtol, atol=base_cfg.atol, max_steps=base_cfg.max_steps,
        dt0=base_cfg.dt0, unit=spec.batch_size, batched_mask=mask,
    )
    x0s = np.asarray(x0s)
    z_a = np.broadcast_to(np.asarray(z_a, dtype=np.float64), x0s.shape[:1])  # per member (a disk's initial.z)
    ctx = jax.vmap(lambda m, x, za: m.observable_context(x, z_a=za))(models, x0s, z_a)
    gc, energy, heading = _observables(models, r.ys, ctx, r.x_final)
    k = len(members)
    idx = np.asarray(members)
    res["status"][idx] = r.status[:k]
    res["t_final"][idx] = r.t_final[:k]
    res["x_final"][idx] = r.x_final[:k]
    res["gc"][idx] = gc[:k]
    res["energy"][idx] = energy[:k]
    res["heading"][idx] = heading[:k]
    with np.errstate(invalid="ignore"):  # a failed member's states are inf past its failure: NaN here
        disp = gc[:k, -1, :2] - gc[:k, 0, :2]
        res["distance"][idx] = np.hypot(disp[:, 0], disp[:, 1])
        res["path_length"][idx] = np.sum(np.hypot(*np.moveaxis(np.diff(gc[:k, :, :2], axis=1), -1, 0)), axis=1)
    for name in ("num_steps", "num_accepted_steps", "num_rejected_steps", "error_estimate"):
        res[name][idx] = getattr(r, name)[:k]
    res["refined"][idx] = r.refined[:k].astype(np.int8)


def run_chunk(out: str | os.PathLike, c: int) -> dict:
    """Compute chunk ``c`` of the sweep in ``out`` and write it (data, then marker).

    Safe to call from any process that sees ``out`` (Dask workers). Returns the marker.
    """
    import jax
    import xarray as xr

    from ...batch import STATUS_INVALID, stack
    from ..config import build_from_mapping
    from ..output import write_json

    out = Path(out)
    spec, saved = _load_saved(out)
    start, stop = spec.chunk_range(c)
    started = time.perf_counter()
    table = {p: np.asarray(v) for p, v in saved["table"].items()}
    n = stop - start
    base_cfg = build_from_mapping(spec.base)
    T, N = len(base_cfg.ts), int(base_cfg.model.state_size)
    res = {name: np.full((n,) + tuple({"component": N, "time": T, "xyz": 3}[d] for d in dims[1:]), fill, dtype=dt)
           for name, (dims, dt, fill, _) in _result_vars(T, N).items()}
    invalid: dict[int, str] = {}
    cfgs: list = [None] * n
    if spec.build == "fast":
        plan = _fast_plan(spec, table)
        models, controls, x0s = plan.assemble(table, start, stop, spec.batch_size)
        _solve_into(res, list(range(n)), models, controls, x0s, base_cfg, spec, table, z_a=base_cfg.z_a)
        n_build = 0
    else:
        n_build = n
    for i in range(n_build):
        try:
            cfg = build_from_mapping(spec.member_mapping({p: table[p][start + i] for p in table}))
            if int(cfg.model.state_size) != N:
                raise ConfigError(f"state size {cfg.model.state_size} differs from the base design's ({N})")
            cfgs[i] = cfg
        except ConfigError as e:
            invalid[start + i] = str(e)
            res["status"][i] = STATUS_INVALID
    valid = [i for i in range(n) if cfgs[i] is not None]
    # Same-structure groups (usually one), each padded to the chunk size: one compiled
    # program for every chunk.
    groups: dict[Any, list[int]] = {}
    for i in valid:
        groups.setdefault(jax.tree.structure((cfgs[i].model, cfgs[i].control)), []).append(i)
    for members in groups.values():
        pad = members + [members[0]] * (spec.batch_size - len(members))
        _solve_into(res, members, stack([cfgs[i].model for i in pad]), stack([cfgs[i].control for i in pad]),
                    np.stack([cfgs[i].x0 for i in pad]), base_cfg, spec, table, z_a=[cfgs[i].z_a for i in pad])
    ds = xr.Dataset({name: (dims, res[name]) for name, (dims, *_rest) in _result_vars(T, N).items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(out / STORE, region={"member": slice(start, stop)}, zarr_format=2, consolidated=False)
    status = res["status"]
    marker = {
        "chunk": c, "start": start, "stop": stop,
        "succeeded": int(np.sum(status == 0)), "failed": int(np.sum((status != 0) & (status != STATUS_INVALID))),
        "invalid": {str(k): v for k, v in invalid.items()},
        "wall_time_s": time.perf_counter() - started, "host": socket.gethostname(), "pid": os.getpid(),
        "devices": len(jax.local_devices()),
    }
    (out / CHUNK_DIR).mkdir(exist_ok=True)
    write_json(out / CHUNK_DIR / f"c{c:06d}.json", marker)
    throttle = float(os.environ.get(THROTTLE_ENV, "0") or 0)
    if throttle > 0:
        time.sleep(throttle)
    return marker


def run_sweep(
    spec: SweepSpec,
    out: str | os.PathLike,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    overwrite: bool = False,
    on_chunk: Callable[[dict], None] | None = None,
) -> dict:
    """Run (or resume) ``spec`` into the results directory ``out``.

    Chunks already marked done are skipped. ``workers``: run the chunks on a new Dask
    ``LocalCluster`` with that many worker processes; ``scheduler``: on an existing Dask
    cluster at that address (``out`` must then be on a file system the workers share).
    Otherwise the chunks run in this process. Returns a summary (counts, wall time).
    Ctrl-C stops after the data already written; rerun to resume.
    """
    out = Path(out)
    started = time.perf_counter()
    spec, saved = _prepare(out, spec, overwrite)
    done = _done_chunks(out)
    pending = [c for c in range(spec.n_chunks) if c not in done]
    bar = _progress(spec.n_chunks, len(done), progress, spec.name)
    markers = []
    try:
        if pending and (workers or scheduler):
            markers = _run_dask(out, pending, workers, scheduler, bar, on_chunk)
        else:
            for c in pending:
                m = run_chunk(out, c)
                markers.append(m)
                bar.update(1)
                if on_chunk:
                    on_chunk(m)
    finally:
        bar.close()
    summary = sweep_status(out)
    summary["wall_time_s"] = time.perf_counter() - started
    summary["chunks_run"] = len(markers)
    return summary


def _progress(total, initial, enabled, name):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="chunk", desc=f"sweep {name}", disable=not enabled, leave=True)


def _run_dask(out: Path, pending, workers, scheduler, bar, on_chunk):
    from dask.distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler:
        try:
            client = Client(scheduler)
        except OSError as e:  # reported as "cannot write <out>" by the CLI before
            raise SweepError(f"cannot connect to the Dask scheduler {scheduler}: {e}") from e
    else:
        cluster = LocalCluster(n_workers=int(workers), threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    markers = []
    try:
        futures = client.map(run_chunk, [str(out.resolve())] * len(pending), pending, pure=False)
        for fut in as_completed(futures):
            m = fut.result()
            markers.append(m)
            bar.update(1)
            if on_chunk:
                on_chunk(m)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return markers
