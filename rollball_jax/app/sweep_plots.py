"""Figures of a sweep (``rollball plot-sweep``): a quantity against the swept parameters,
and the GC paths of a selection of members.

- ``<quantity>_vs_<x>.png``: against one swept parameter — every member as a point and,
  for a grid parameter, the mean and range over the other parameters;
- ``<quantity>_<x>_<y>.png``: two swept parameters — heat map of the mean over the
  remaining ones when both are grid parameters, a coloured scatter otherwise;
- ``gc_paths.png``: GC paths (spatial e1–e2 plane) of up to ``n_paths`` members spread
  over the sweep, coloured by the first swept parameter;
- ``status.png``: member status counts.

Quantities: ``distance`` (|GC(t1) − GC(t0)|), ``heading`` (direction of the final GC
velocity), ``path_length``, ``energy_drift`` (E(t1) − E(t0)) and ``num_steps``. Failed
and invalid members are left out (and counted in ``status.png``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from .output import atomic_path

__all__ = ["QUANTITIES", "plot_sweep", "sweep_quantity"]

QUANTITIES = ("distance", "heading", "path_length", "energy_drift", "num_steps")
_LABELS = {
    "distance": "distance rolled |GC(t1) − GC(t0)|",
    "heading": "final heading [rad]",
    "path_length": "GC path length",
    "energy_drift": "energy E(t1) − E(t0)",
    "num_steps": "solver steps",
}


def sweep_quantity(ds, quantity: str) -> np.ndarray:
    """Per-member values of ``quantity`` (NaN where the member did not succeed)."""
    if quantity == "energy_drift":
        e = np.asarray(ds["energy"])
        v = e[:, -1] - e[:, 0]
    elif quantity in ds:
        v = np.asarray(ds[quantity], dtype=float)
    else:
        raise ValueError(f"unknown quantity {quantity!r} (choose one of {', '.join(QUANTITIES)})")
    return np.where(np.asarray(ds["status"]) == 0, v, np.nan)


def _swept(ds) -> list[tuple[str, str, bool]]:
    """(coordinate name, key path, is grid) of every swept parameter, in file order."""
    paths = json.loads(ds.attrs.get("swept_paths", "[]"))
    grid = set(json.loads(ds.attrs.get("grid_paths", "[]")))
    out = []
    for name, c in ds.coords.items():
        if c.dims == ("member",) and "path" in c.attrs:
            out.append((name, c.attrs["path"], c.attrs["path"] in grid))
    out.sort(key=lambda t: paths.index(t[1]) if t[1] in paths else len(paths))
    return out


def _resolve(ds, key: str | None, swept) -> tuple[str, str, bool] | None:
    if key is None:
        return None
    for name, path, g in swept:
        if key in (name, path):
            return name, path, g
    raise ValueError(f"{key!r} is not a swept parameter (swept: {', '.join(p for _, p, _ in swept) or 'none'})")


def _save(fig: Figure, path: Path, dpi: int) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    return path


def _line_figure(ds, q, xv, quantity, xinfo) -> Figure:
    name, path, is_grid = xinfo
    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.add_subplot()
    ok = np.isfinite(q)
    ax.plot(xv[ok], q[ok], ".", color="0.6", ms=4, label="members")
    if is_grid:
        ux = np.unique(xv)
        mean = np.array([np.nanmean(q[xv == u]) if np.any(ok & (xv == u)) else np.nan for u in ux])
        lo = np.array([np.nanmin(q[xv == u]) if np.any(ok & (xv == u)) else np.nan for u in ux])
        hi = np.array([np.nanmax(q[xv == u]) if np.any(ok & (xv == u)) else np.nan for u in ux])
        ax.fill_between(ux, lo, hi, color="C0", alpha=0.15, lw=0, label="range over the other parameters")
        ax.plot(ux, mean, "-o", color="C0", label="mean over the other parameters")
    ax.set_xlabel(path)
    ax.set_ylabel(_LABELS.get(quantity, quantity))
    ax.set_title(f"{ds.attrs.get('sweep_name', 'sweep')}: {quantity} vs {path}")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def _map_figure(ds, q, xv, yv, quantity, xinfo, yinfo) -> Figure:
    fig = Figure(figsize=(6.4, 4.8), layout="constrained")
    ax = fig.add_subplot()
    if xinfo[2] and yinfo[2]:
        ux, uy = np.unique(xv), np.unique(yv)
        grid = np.full((uy.size, ux.size), np.nan)
        for j, b in enumerate(uy):
            for i, a in enumerate(ux):
                sel = (xv == a) & (yv == b) & np.isfinite(q)
                if np.any(sel):
                    grid[j, i] = np.mean(q[sel])
        im = ax.pcolormesh(_edges(ux), _edges(uy), grid, shading="flat", cmap="viridis")
        fig.colorbar(im, ax=ax, label=_LABELS.get(quantity, quantity) + (" (mean)" if xv.size > grid.size else ""))
    else:
        ok = np.isfinite(q)
        sc = ax.scatter(xv[ok], yv[ok], c=q[ok], s=16, cmap="viridis")
        fig.colorbar(sc, ax=ax, label=_LABELS.get(quantity, quantity))
    ax.set_xlabel(xinfo[1])
    ax.set_ylabel(yinfo[1])
    ax.set_title(f"{ds.attrs.get('sweep_name', 'sweep')}: {quantity}")
    return fig


def _edges(u: np.ndarray) -> np.ndarray:
    if u.size == 1:
        return np.array([u[0] - 0.5, u[0] + 0.5])
    mid = 0.5 * (u[1:] + u[:-1])
    return np.concatenate([[2 * u[0] - mid[0]], mid, [2 * u[-1] - mid[-1]]])


def _paths_figure(ds, n_paths, color_info) -> Figure:
    import matplotlib as mpl

    fig = Figure(figsize=(6.4, 5.6), layout="constrained")
    ax = fig.add_subplot()
    status = np.asarray(ds["status"])
    ok = np.nonzero(status == 0)[0]
    sel = ok[np.unique(np.linspace(0, ok.size - 1, min(n_paths, ok.size)).round().astype(int))] if ok.size else ok
    gc = np.asarray(ds["gc"])
    cmap = mpl.colormaps["viridis"]
    if color_info is not None:
        cv = np.asarray(ds[color_info[0]])
        lo, hi = float(np.min(cv)), float(np.max(cv))
        norm = mpl.colors.Normalize(lo, hi if hi > lo else lo + 1)
    for m in sel:
        c = cmap(norm(cv[m])) if color_info is not None else None
        ax.plot(gc[m, :, 0], gc[m, :, 1], lw=1.0, color=c)
        ax.plot(gc[m, -1, 0], gc[m, -1, 1], "o", ms=3, color=c)
    ax.plot([0], [0], "k+", ms=10)
    if color_info is not None and sel.size:
        fig.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=color_info[1])
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("e1")
    ax.set_ylabel("e2")
    ax.set_title(f"GC paths of {sel.size} of {status.size} members (dot: end)")
    ax.grid(alpha=0.3)
    return fig


def _status_figure(ds) -> Figure:
    names = json.loads(ds.attrs.get("status_names", "{}"))
    status = np.asarray(ds["status"])
    codes, counts = np.unique(status, return_counts=True)
    fig = Figure(figsize=(6.4, 3.2), layout="constrained")
    ax = fig.add_subplot()
    labels = [names.get(str(int(c)), str(int(c))) for c in codes]
    ax.barh(labels, counts, color=["C2" if c == 0 else "C3" for c in codes])
    for i, n in enumerate(counts):
        ax.text(n, i, f" {n}", va="center")
    ax.set_xlabel("members")
    ax.set_title("member status")
    return fig


def plot_sweep(
    results: str | os.PathLike,
    *,
    quantity: str = "distance",
    x: str | None = None,
    y: str | None = None,
    n_paths: int = 12,
    out_dir: str | os.PathLike | None = None,
    dpi: int = 120,
) -> dict[str, Path]:
    """Write the figures of the sweep in ``results`` (see the module docstring) into
    ``out_dir`` (default ``results/figures``); returns ``{figure name: path}``.

    Without ``x``/``y``: the first swept parameter (line plot) and, when there are at
    least two, the first two (heat map).
    """
    from .sweep import open_sweep

    if isinstance(n_paths, bool) or not isinstance(n_paths, (int, np.integer)) or n_paths < 1:
        raise ValueError(f"the number of GC paths must be a positive integer; got {n_paths!r}")  # 0: an empty figure
    ds = open_sweep(results)
    swept = _swept(ds)
    out = Path(results) / "figures" if out_dir is None else Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    q = sweep_quantity(ds, quantity)
    xinfo = _resolve(ds, x, swept) or (swept[0] if swept else None)
    yinfo = _resolve(ds, y, swept) if y is not None else (swept[1] if (x is None and len(swept) > 1) else None)
    if x is not None and y is not None and xinfo is not None and yinfo is not None and xinfo[0] == yinfo[0]:
        raise ValueError(f"x and y name the same parameter ({xinfo[0]}): a heat map needs two")  # it was left out, silently
    written: dict[str, Path] = {}
    if xinfo is not None:
        xv = np.asarray(ds[xinfo[0]])
        written["line"] = _save(_line_figure(ds, q, xv, quantity, xinfo), out / f"{quantity}_vs_{xinfo[0]}.png", dpi)
        if yinfo is not None and yinfo[0] != xinfo[0]:
            yv = np.asarray(ds[yinfo[0]])
            written["map"] = _save(_map_figure(ds, q, xv, yv, quantity, xinfo, yinfo), out / f"{quantity}_{xinfo[0]}_{yinfo[0]}.png", dpi)
    written["gc_paths"] = _save(_paths_figure(ds, n_paths, xinfo), out / "gc_paths.png", dpi)
    written["status"] = _save(_status_figure(ds), out / "status.png", dpi)
    return written
