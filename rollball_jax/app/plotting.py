"""Figures of a run, in the spirit of the paper's Fig. 6.3 (disk) and Fig. 7.2 (ball).

Built on ``matplotlib.figure.Figure`` with the Agg canvas: no ``pyplot`` state, no
backend switch, nothing left open. :func:`make_figures` returns the figures;
:func:`plot_run` saves them as PNGs (atomically) and returns their paths:

- ``paths_body.png``    (a) point-mass and total-CM paths, body frame translated to the GC
- ``paths_spatial.png`` (b) the same in the spatial frame translated to the GC (z − z_GC)
- ``gc_path.png``       (c) GC and contact-point (CP) path: ball in the e1–e2 plane, disk e1 vs t
- ``time_series.png``   (d) orientation, angular velocity and energy vs time

Axes of the ball are 3-D (with three great circles of the ball); the disk is drawn in
its plane (body x–z, spatial e1–e3) with its outline circle.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from .output import atomic_path

__all__ = ["FIGURES", "make_figures", "plot_run"]

#: File stem of each figure made by :func:`make_figures` / :func:`plot_run`.
FIGURES = ("paths_body", "paths_spatial", "gc_path", "time_series")

_CM_STYLE = dict(color="black", lw=1.6, label="total system CM")


def _is_ball(solution) -> bool:
    """3-D figures unless the model's motion is planar (``model.planar``, the disk)."""
    return not solution.model.planar


def _mass_colors(n: int) -> list:
    import matplotlib as mpl

    cmap = mpl.colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def _great_circles(ax, r: float) -> None:
    """Equator and two meridians of a sphere of radius ``r`` on 3-D axes."""
    s = np.linspace(0.0, 2.0 * np.pi, 181)
    c, z = r * np.cos(s), r * np.sin(s)
    o = np.zeros_like(s)
    for x, y, w in ((c, z, o), (c, o, z), (o, c, z)):
        ax.plot(x, y, w, color="0.7", lw=0.8)


def _paths_figure(solution, frame: str) -> Figure:
    """(a)/(b): mass and total-CM paths relative to the GC, in the body or spatial frame."""
    ball = _is_ball(solution)
    r = float(solution.model.radius)
    if frame == "body":
        masses, cm = solution.masses_body, solution.cm_body
        where = "body frame translated to the GC"
        names = ("x (E1)", "y (E2)", "z (E3)")
    else:
        gc = solution.gc
        masses, cm = solution.masses_spatial - gc[:, None, :], solution.cm_spatial - gc
        where = "spatial frame translated to the GC"
        names = ("e1", "e2", "e3")
    n = masses.shape[1]
    colors = _mass_colors(n)
    body = solution.model.kind
    title = f"Point masses and total system CM, {where}"
    fig = Figure(figsize=(7.0, 6.4) if ball else (6.4, 6.4), layout="constrained")
    if ball:
        ax = fig.add_subplot(projection="3d")
        _great_circles(ax, r)
        for i in range(n):
            p = masses[:, i]
            ax.plot(p[:, 0], p[:, 1], p[:, 2], color=colors[i], lw=1.0, label=f"m{i + 1}")
            ax.scatter(*p[0], color=colors[i], marker="o", s=25)
            ax.scatter(*p[-1], color=colors[i], marker="s", s=25)
        ax.plot(cm[:, 0], cm[:, 1], cm[:, 2], **_CM_STYLE)
        ax.scatter(*cm[0], color="black", marker="o", s=25)
        ax.scatter(*cm[-1], color="black", marker="s", s=25)
        ax.scatter(0, 0, 0, color="0.3", marker="+", s=60, label="GC")
        ax.set(xlim=(-r, r), ylim=(-r, r), zlim=(-r, r), xlabel=names[0], ylabel=names[1], zlabel=names[2])
        ax.set_box_aspect((1, 1, 1))
    else:
        ax = fig.add_subplot()
        s = np.linspace(0.0, 2.0 * np.pi, 361)
        ax.plot(r * np.cos(s), r * np.sin(s), color="0.6", lw=1.0, label=f"{body} outline")
        for i in range(n):
            p = masses[:, i]
            ax.plot(p[:, 0], p[:, 2], color=colors[i], lw=1.0, label=f"m{i + 1}")
            ax.plot(p[0, 0], p[0, 2], color=colors[i], marker="o", ms=5)
            ax.plot(p[-1, 0], p[-1, 2], color=colors[i], marker="s", ms=5)
        ax.plot(cm[:, 0], cm[:, 2], **_CM_STYLE)
        ax.plot(cm[0, 0], cm[0, 2], "ko", ms=5)
        ax.plot(cm[-1, 0], cm[-1, 2], "ks", ms=5)
        ax.plot(0, 0, "+", color="0.3", ms=10, label="GC")
        ax.set(xlabel=names[0], ylabel=names[2], aspect="equal", xlim=(-1.1 * r, 1.1 * r), ylim=(-1.1 * r, 1.1 * r))
        ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small", title="○ start, □ end", title_fontsize="small")
    fig.suptitle(f"({'a' if frame == 'body' else 'b'}) {title}", fontsize="medium")
    return fig


def _mark_ends(ax, x, y, color):
    ax.plot(x[0], y[0], "o", color=color, ms=6)
    ax.plot(x[-1], y[-1], "s", color=color, ms=6)


def _gc_figure(solution) -> Figure:
    """(c): GC and CP path; the CP lies directly below the GC (height −r)."""
    t = solution.ts
    gc, cp = solution.gc, solution.contact_point
    r = float(solution.model.radius)
    if _is_ball(solution):
        fig = Figure(figsize=(11.0, 4.8), layout="constrained")
        ax, ax_t = fig.subplots(1, 2, width_ratios=(1.1, 1.0))
        ax.plot(gc[:, 0], gc[:, 1], color="C0", lw=2.2, label="GC (height 0)")
        ax.plot(cp[:, 0], cp[:, 1], color="C3", lw=1.0, ls="--", label=f"CP (height −r = {-r:g})")
        _mark_ends(ax, gc[:, 0], gc[:, 1], "C0")
        for tk in _time_marks(t):
            k = int(np.argmin(np.abs(t - tk)))
            ax.annotate(f"t={t[k]:g}", gc[k, :2], textcoords="offset points", xytext=(4, 4), fontsize="x-small")
            ax.plot(*gc[k, :2], ".", color="C0")
        ax.set(xlabel="e1", ylabel="e2", aspect="equal", title="path in the e1–e2 plane (○ start, □ end)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        ax_t.plot(t, gc[:, 0], label="GC e1 = CP e1")
        ax_t.plot(t, gc[:, 1], label="GC e2 = CP e2")
        ax_t.set(xlabel="time t", ylabel="position", title="GC/CP horizontal position vs time")
        ax_t.grid(alpha=0.3)
        ax_t.legend(fontsize="small")
    else:
        fig = Figure(figsize=(8.0, 4.4), layout="constrained")
        ax = fig.add_subplot()
        ax.plot(t, gc[:, 0], color="C0", lw=2.2, label="GC e1 (height 0)")
        ax.plot(t, cp[:, 0], color="C3", lw=1.0, ls="--", label=f"CP e1 (height −r = {-r:g})")
        ax.set(xlabel="time t", ylabel="e1 position z", title="z = z_a − r (φ − φ_a) (5.41)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle("(c) Trajectory of the GC and the contact point CP, spatial frame", fontsize="medium")
    return fig


def _time_marks(t) -> list[float]:
    """A few round times inside (t0, t1] to annotate along a path."""
    t0, t1 = float(t[0]), float(t[-1])
    step = 10.0 ** np.floor(np.log10((t1 - t0) / 4.0)) if t1 > t0 else 1.0
    for factor in (1, 2, 5, 10):
        if (t1 - t0) / (factor * step) <= 5:
            step *= factor
            break
    return list(np.arange(np.ceil(t0 / step) * step, t1 + 0.5 * step, step))[1:] if step > 0 else []


def _time_series_figure(solution) -> Figure:
    """(d): orientation, angular velocity and energy vs time."""
    t, xs = solution.ts, solution.xs
    n = solution.n
    if _is_ball(solution):
        fig = Figure(figsize=(8.5, 9.0), layout="constrained")
        axes = fig.subplots(4, 1, sharex=True)
        q = xs[:, 2 * n : 2 * n + 4]
        for j in range(4):
            axes[0].plot(t, q[:, j], label=f"q{j}")
        axes[0].set(ylabel="versor q", title="orientation (versor, scalar first)")
        for j in range(3):
            axes[1].plot(t, solution.omega_body[:, j], label=f"Ω{j + 1}")
        axes[1].set(ylabel="Ω", title="angular velocity, body frame")
        for j in range(3):
            axes[2].plot(t, solution.omega_spatial[:, j], label=f"ω{j + 1}")
        axes[2].set(ylabel="ω", title="angular velocity, spatial frame")
        energy_ax = axes[3]
    else:
        fig = Figure(figsize=(8.5, 7.0), layout="constrained")
        axes = fig.subplots(3, 1, sharex=True)
        axes[0].plot(t, xs[:, 2 * n], label="φ")
        axes[0].set(ylabel="φ [rad]", title="orientation: rotation angle φ about E2 (5.29)")
        axes[1].plot(t, xs[:, 2 * n + 1], label="φ̇")
        axes[1].set(ylabel="φ̇ [rad/time]", title="angular velocity (Ω = (0, −φ̇, 0), 5.30)")
        energy_ax = axes[2]
    energy = solution.energy
    energy_ax.plot(t, energy, color="black", label="E = T + V")
    energy_ax.set(ylabel="energy", title="total energy (5.3, 5.4); V relative to the GC height", xlabel="time t")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="best", ncols=4)
    fig.suptitle("(d) Orientation, angular velocity and energy vs time", fontsize="medium")
    return fig


def make_figures(solution) -> dict[str, Figure]:
    """The four figures of :data:`FIGURES` for a ``Solution`` (ball or disk)."""
    return {
        "paths_body": _paths_figure(solution, "body"),
        "paths_spatial": _paths_figure(solution, "spatial"),
        "gc_path": _gc_figure(solution),
        "time_series": _time_series_figure(solution),
    }


def plot_run(solution, out_dir: str | os.PathLike, *, dpi: int = 120) -> dict[str, Path]:
    """Save :func:`make_figures` as ``<name>.png`` in ``out_dir`` (created if needed).

    Returns ``{name: path}``. Each file is written atomically.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, fig in make_figures(solution).items():
        target = out_dir / f"{name}.png"
        with atomic_path(target) as tmp:
            fig.savefig(tmp, format="png", dpi=dpi)
        paths[name] = target
    return paths
