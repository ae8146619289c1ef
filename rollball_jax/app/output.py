"""Run directories: trajectory (NetCDF), summary (JSON) and the effective config (TOML).

:func:`write_run` writes into a run directory:

- ``trajectory.nc`` — :func:`trajectory_dataset` as NetCDF-4 (engine ``h5netcdf`` when
  ``h5py`` is installed, else ``netcdf4``; see :func:`netcdf_engine`);
- ``config.toml`` — the configuration that produced the run (re-runnable), if given;
- ``summary.json`` — :func:`summary_dict`; written last, so its presence marks a complete run.

Every file is written atomically: to a temporary file in the same directory, then
``os.replace`` d onto its name, so readers never see a half-written file.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from .. import __version__

__all__ = [
    "TRAJECTORY_FILE",
    "SUMMARY_FILE",
    "CONFIG_FILE",
    "atomic_path",
    "netcdf_engine",
    "write_text",
    "write_json",
    "trajectory_dataset",
    "summary_dict",
    "write_run",
]

TRAJECTORY_FILE = "trajectory.nc"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.toml"

# Observables written to the NetCDF file: name -> (dims after "time", long name, frame).
_VARIABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "gc": (("xyz",), "geometric centre (GC) position", "spatial"),
    "contact_point": (("xyz",), "contact point (CP) position", "spatial"),
    "orientation": (("xyz", "body_axis"), "rotation matrix Lambda (body -> spatial); column j = body axis E_j", "spatial"),
    "omega_body": (("xyz",), "angular velocity Omega", "body"),
    "omega_spatial": (("xyz",), "angular velocity omega = Lambda Omega", "spatial"),
    "masses_body": (("mass", "xyz"), "point-mass positions zeta_i(theta_i)", "body frame translated to the GC"),
    "masses_spatial": (("mass", "xyz"), "point-mass positions z_GC + Lambda zeta_i", "spatial"),
    "cm_body": (("xyz",), "total system centre of mass", "body frame translated to the GC"),
    "cm_spatial": (("xyz",), "total system centre of mass", "spatial"),
    "energy": ((), "total energy T + V (eqs. 5.3, 5.4), V relative to the GC height", ""),
}


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success ``os.replace`` it onto ``path``.

    The temporary file is removed if the body raises. The parent directory must exist.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o644)
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON (floats round-trip exactly) to ``path`` atomically."""
    return write_text(path, json.dumps(obj, indent=2, allow_nan=True) + "\n")


def netcdf_engine() -> str:
    """xarray engine used to write NetCDF-4: ``"h5netcdf"`` (needs ``h5py``), else ``"netcdf4"``.

    h5netcdf ≥ 1.5 no longer installs ``h5py`` itself and cannot write without it.
    """
    for module, engine in (("h5py", "h5netcdf"), ("netCDF4", "netcdf4")):
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        return engine
    raise RuntimeError("writing NetCDF needs 'h5py' (for h5netcdf) or 'netCDF4': pip install h5py")


def _model_type(model) -> str:
    return model.kind


def _config_attrs(config) -> dict[str, Any]:
    if config is None:
        return {}
    return {
        "config_name": config.name,
        "config_toml": config.to_toml(),
        "config_json": json.dumps(config.mapping),
        "config_source": "" if config.source is None else str(config.source),
    }


def trajectory_dataset(solution, config=None) -> xr.Dataset:
    """The trajectory of ``solution`` as an ``xarray.Dataset``.

    Dimensions: ``time`` (T), ``component`` (N: state labels in the paper's order,
    (7.1)/(6.1); xarray forbids naming it ``state`` like the variable),
    ``mass`` (n, numbered 1…n), ``xyz`` (3: components x, y, z, i.e. e1–e3 in the spatial
    or E1–E3 in the body frame), ``body_axis`` (3: E1, E2, E3). Variables: ``state``
    (time, component) and the observables of :func:`rollball_jax.observables.observables`;
    each carries ``long_name`` and ``frame`` attributes. ``requested`` (time,) marks the
    times listed explicitly in the config's ``[time] ts``. Global attributes hold the
    package version, model, solver settings, step counts and (with ``config``) the
    configuration as TOML (``config_toml``) and JSON (``config_json``).
    """
    model = solution.model
    ts = np.asarray(solution.ts)
    data_vars: dict[str, Any] = {
        "state": (("time", "component"), np.asarray(solution.xs), {"long_name": "state vector x, paper ordering"}),
    }
    for name, (dims, long_name, frame) in _VARIABLES.items():
        values = np.asarray(getattr(solution, name))
        data_vars[name] = (("time", *dims), values, {"long_name": long_name, "frame": frame})
    requested = np.zeros(ts.shape, dtype=bool)
    if config is not None and config.ts_requested.size:
        requested = np.isin(ts, config.ts_requested)
    data_vars["requested"] = (("time",), requested.astype(np.int8), {
        "long_name": "1 where the time was listed explicitly in the config's [time] ts",
    })
    coords = {
        "time": ("time", ts, {"long_name": "time"}),
        "component": ("component", np.asarray(solution.state_labels, dtype=object), {"long_name": "state label"}),
        "mass": ("mass", np.arange(1, model.n + 1, dtype=np.int64)),
        "xyz": ("xyz", np.asarray(["x", "y", "z"], dtype=object)),
        "body_axis": ("body_axis", np.asarray(["E1", "E2", "E3"], dtype=object)),
    }
    attrs = {
        "title": f"rollball_jax trajectory ({_model_type(model)})",
        "rollball_jax_version": __version__,
        "model_type": _model_type(model),
        "n_masses": int(model.n),
        "solver": solution.solver,
        "rtol": float(solution.rtol),
        "atol": float(solution.atol),
        "steps_accepted": int(solution.stats.get("num_accepted_steps", -1)),
        "steps_rejected": int(solution.stats.get("num_rejected_steps", -1)),
        "wall_time_s": float(solution.wall_time),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "conventions": (
            "Putkaradze & Rogers (rolling ball paper): body frame translated to the GC; spatial frame with the "
            "e1-e2 plane through the GC (GC height 0, CP height -r); state ordering (7.1) ball, (6.1) disk"
        ),
        **_config_attrs(config),
    }
    return xr.Dataset(data_vars=data_vars, coords=coords, attrs=attrs)


def _steps(solution) -> dict[str, int]:
    s = solution.stats
    return {
        "accepted": int(s.get("num_accepted_steps", -1)),
        "rejected": int(s.get("num_rejected_steps", -1)),
        "total": int(s.get("num_steps", -1)),
    }


def summary_dict(solution, config=None) -> dict[str, Any]:
    """JSON-ready summary of a run.

    Keys: ``t_final``, ``state_labels`` and ``state_final`` (paper ordering),
    ``state_final_named`` (label → value), ``gc_final``/``contact_point_final``
    (spatial, (3,)), ``energy_initial``/``energy_final``, ``steps`` (accepted, rejected,
    total), ``wall_time_s`` (includes JIT compilation on a first call), ``model_type``,
    ``n_masses``, ``solver``, ``rtol``, ``atol``, ``t_span``, ``n_times``,
    ``requested_states`` (times listed in ``[time] ts`` and their states), version and
    config name.
    """
    labels = list(solution.state_labels)
    xs = np.asarray(solution.xs)
    ts = np.asarray(solution.ts)
    x_final = [float(v) for v in xs[-1]]
    out: dict[str, Any] = {
        "rollball_jax_version": __version__,
        "config_name": None if config is None else config.name,
        "model_type": _model_type(solution.model),
        "n_masses": int(solution.model.n),
        "solver": solution.solver,
        "rtol": float(solution.rtol),
        "atol": float(solution.atol),
        "max_steps": None if config is None else int(config.max_steps),
        "t_span": [float(ts[0]), float(ts[-1])] if config is None else [float(t) for t in config.t_span],
        "n_times": int(ts.shape[0]),
        "t_final": float(ts[-1]),
        "state_labels": labels,
        "state_final": x_final,
        "state_final_named": dict(zip(labels, x_final)),
        "gc_final": [float(v) for v in np.asarray(solution.gc)[-1]],
        "contact_point_final": [float(v) for v in np.asarray(solution.contact_point)[-1]],
        "energy_initial": float(np.asarray(solution.energy)[0]),
        "energy_final": float(np.asarray(solution.energy)[-1]),
        "steps": _steps(solution),
        "wall_time_s": float(solution.wall_time),
    }
    if config is not None and config.ts_requested.size:
        idx = [int(np.argmin(np.abs(ts - t))) for t in config.ts_requested]
        out["requested_states"] = {
            "t": [float(ts[i]) for i in idx],
            "states": [[float(v) for v in xs[i]] for i in idx],
        }
    return out


def write_run(run_dir: str | os.PathLike, solution, config=None) -> dict[str, Path]:
    """Write ``trajectory.nc``, ``config.toml`` (if ``config``) and ``summary.json`` into ``run_dir``.

    Creates ``run_dir`` (and parents) if needed; existing files of the same names are
    replaced atomically. Returns ``{"trajectory": path, "config": path, "summary": path}``.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}

    ds = trajectory_dataset(solution, config)
    target = run_dir / TRAJECTORY_FILE
    with atomic_path(target) as tmp:
        ds.to_netcdf(tmp, engine=netcdf_engine(), format="NETCDF4")
    paths["trajectory"] = target

    if config is not None:
        paths["config"] = write_text(run_dir / CONFIG_FILE, config.to_toml())

    summary = summary_dict(solution, config)
    summary["files"] = [p.name for p in paths.values()] + [SUMMARY_FILE]
    paths["summary"] = write_json(run_dir / SUMMARY_FILE, summary)
    return paths
