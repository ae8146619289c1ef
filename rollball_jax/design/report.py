"""Figures and JSON summaries of a design (used by ``experiments/design_*.py``).

:func:`write_figures` draws, from a :class:`~.optimize.DesignResult` and its
:class:`~.verify.Verification` (the independent SciPy trajectory):

* ``gc_path.png`` — the GC path in the plane (ball) or z_GC(t) (disk), with start,
  targets, keep-out discs and a reference path;
* ``controls.png`` — the rail accelerations u_i(t) = θ̈_i with their knots;
* ``rail_angles.png`` — θ_i(t) and θ̇_i(t);
* ``cost_history.png`` — cost versus iteration (log scale), stage boundaries marked;
* ``contact.png`` — normal force N(t) and friction ratio |F_t|/N with their bounds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._typing import RealScalar
from .conditions import check_condition
from .costs import (
    ContactFeasibility,
    Continuity,
    Cost,
    KeepOutDiscs,
    RailAccelBound,
    RailSpeedBound,
    TargetGC,
    TrackPath,
)
from .feedback import tvlqr
from .shooting import FEEDBACK_REFINE, MultipleShooting

__all__ = ["run_experiment", "print_summary", "write_json", "write_figures"]


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.ndarray, jax.Array)):
        return _jsonable(np.asarray(x).tolist())
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    return x


def _setting(v):
    """A feedback setting for JSON: a diagonal matrix as its diagonal."""
    a = np.asarray(v)
    if a.ndim == 2 and a.shape[0] == a.shape[1] and np.array_equal(a, np.diag(np.diag(a))):
        return {"diagonal": np.diag(a).tolist()}
    return a.tolist()


def write_json(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as indented JSON (NumPy/JAX arrays and scalars converted)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(data), indent=2) + "\n")
    return path


def _terms(cost, kind):
    return [t for t in cost.terms if isinstance(t, kind)]


def write_figures(result, verification, out_dir: str | Path, *, title: str = "", stage_ends: list[int] | None = None) -> list[Path]:
    """Write the five figures (see module docstring) into ``out_dir``; returns their paths.
    Raises ``ImportError`` naming the ``app`` extra if matplotlib is not installed."""
    from .._extras import require

    require("design figures", ("matplotlib",))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problem, cost = result.problem, result.cost
    control = result.control
    ts_v, gc_v = verification.ts, verification.gc
    n = problem.model.n
    paths = []
    is_disk = problem.model.planar

    # GC path
    fig, ax = plt.subplots(figsize=(6, 5))
    if is_disk:
        ax.plot(ts_v, gc_v[:, 0], label="GC (SciPy DOP853 re-simulation)")
        ax.plot(result.ts, result.evaluation().gc[:, 0], "--", label="GC (design solve)")
        for t in _terms(cost, TargetGC):
            ax.axhline(float(t.target[0]), color="k", ls=":", label="target")
        ax.set_xlabel("t")
        ax.set_ylabel("z_GC (e1) [radii]")
    else:
        for t in _terms(cost, KeepOutDiscs):
            for c, r in zip(np.asarray(t.centers), np.asarray(t.radii)):
                ax.add_patch(plt.Circle(c, r, color="tab:red", alpha=0.3))
                ax.add_patch(plt.Circle(c, r, color="tab:red", fill=False))
        for t in _terms(cost, TrackPath):
            ref = np.asarray(jax.vmap(t.reference)(jnp.asarray(ts_v)))
            ax.plot(ref[:, 0], ref[:, 1], "k:", lw=2, label="reference")
        ax.plot(gc_v[:, 0], gc_v[:, 1], label="GC (SciPy re-simulation)")
        ax.plot(gc_v[0, 0], gc_v[0, 1], "go", label="start")
        for t in _terms(cost, TargetGC):
            ax.plot(*np.asarray(t.target), "k*", ms=14, label="target")
        ax.plot(gc_v[-1, 0], gc_v[-1, 1], "bx", ms=10, label="end")
        ax.set_aspect("equal")
        ax.set_xlabel("e1 [radii]")
        ax.set_ylabel("e2 [radii]")
    ax.legend(fontsize=8)
    ax.set_title(title or "GC path")
    fig.tight_layout()
    paths.append(out / "gc_path.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    # controls
    t_dense = np.linspace(0.0, problem.horizon, 1001)
    u = np.asarray(jax.vmap(control)(jnp.asarray(t_dense)))
    knots = np.asarray(control.knots)
    uk = np.asarray(control.values)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i in range(n):
        (line,) = ax.plot(t_dense, u[:, i], label=f"u{i + 1} = θ̈{i + 1}")
        ax.plot(knots, uk[i], "o", color=line.get_color(), ms=3)
    for t in _terms(cost, RailAccelBound):
        for s in (-1, 1):
            ax.axhline(s * float(t.max_accel), color="k", ls=":")
    ax.set_xlabel("t")
    ax.set_ylabel("rail acceleration")
    ax.legend(fontsize=8, ncol=2)
    ax.set_title("controls (dots: knots)")
    fig.tight_layout()
    paths.append(out / "controls.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    # rail angles and rates
    xs = verification.xs
    fig, axes = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for i in range(n):
        axes[0].plot(ts_v, xs[:, i], label=f"θ{i + 1}")
        axes[1].plot(ts_v, xs[:, n + i], label=f"θ̇{i + 1}")
    for t in _terms(cost, RailSpeedBound):
        for s in (-1, 1):
            axes[1].axhline(s * float(t.max_speed), color="k", ls=":")
    axes[0].set_ylabel("θ [rad]")
    axes[1].set_ylabel("θ̇ [rad/time]")
    axes[1].set_xlabel("t")
    axes[0].legend(fontsize=8, ncol=4)
    fig.tight_layout()
    paths.append(out / "rail_angles.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    # cost history
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.semilogy(np.arange(result.history.size), result.history)
    for s in stage_ends or []:
        ax.axvline(s, color="k", ls=":", lw=0.8)
    ax.set_xlabel("iteration")
    ax.set_ylabel("cost")
    ax.set_title(f"cost history ({result.method})")
    fig.tight_layout()
    paths.append(out / "cost_history.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    # contact margins
    fig, axes = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    axes[0].plot(ts_v, verification.normal)
    axes[0].axhline(0.0, color="k", lw=0.8)
    axes[1].plot(ts_v, verification.friction_ratio)
    for t in _terms(cost, ContactFeasibility):
        axes[0].axhline(float(t.n_min), color="tab:red", ls=":", label="N_min")
        if t.mu is not None:
            axes[1].axhline(float(t.mu), color="tab:red", ls=":", label="μ")
    axes[0].set_ylabel("normal force N")
    axes[1].set_ylabel("|F_t| / N")
    axes[1].set_xlabel("t")
    for a in axes:
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8)
    axes[0].set_title("contact force (SciPy re-simulation)")
    fig.tight_layout()
    paths.append(out / "contact.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def run_experiment(
    name: str,
    description: str,
    problem,
    stages: list,
    params0=None,
    *,
    goals: dict[str, tuple[str, float]] | None = None,
    quick: bool = False,
    out: str | Path | None = None,
    progress: bool = True,
    plots: bool = True,
    method: str = "lm",
    max_steps: int = 200,
    rtol: RealScalar = 1e-9,
    atol: RealScalar = 1e-12,
    hold: float = 0.0,
    refine: int = 8,
    title: str = "",
    extra: dict | None = None,
    feedback: dict | None = None,
    target_cost: float | Sequence[float | None] | None = None,
    stall_rtol: float = 1e-6,
    stop_when: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Optimise through ``stages`` (continuation), verify with SciPy, write figures and
    ``summary.json`` into ``out``; return the summary.

    ``goals``: ``{label: (metric, limit)}`` checked on the *verified* metrics
    (``metric <= limit``; a metric name prefixed with ``-`` is negated first, so
    ``("-min_clearance", 0.0)`` means clearance ≥ 0).

    ``target_cost``: stop every stage once its cost is at most this, or one value (or ``None``)
    per stage; ``stall_rtol``: stop a stage when its cost has not improved by this relative
    amount in 20 iterations (see :func:`~.optimize.optimize` and :func:`~.optimize.continuation`).
    ``stop_when``: ``{metric: limit}`` on the *design's* own metrics (same sign convention as
    ``goals``; evaluated with each stage's own terms, whose metrics do not depend on the
    weights); a stage stops once all of them hold (``optimize``'s ``stop_when``), e.g. goals
    made 10× tighter than the verified ones: the remaining iterations would only trade the
    regularising terms (control effort).

    ``feedback``: verify the design *closed loop*: a TVLQR controller (:func:`~.feedback.tvlqr`,
    keyword arguments from this dict, e.g. ``Q``, ``R``) around the designed motion, the
    goals checked on the SciPy re-simulation under it; the open-loop re-simulation is
    reported too (``open_loop_verification``). A :class:`~.shooting.MultipleShooting`
    problem is always verified this way (its segments, not one open-loop solve, are the
    nominal motion; an unstable plan cannot be verified open loop).
    """
    import time

    from .optimize import continuation
    from .verify import verify

    start = time.perf_counter()
    out = Path(out or f"runs/design/{name}" + ("_quick" if quick else ""))
    final, results = continuation(problem, stages, params0, method=method, max_steps=max_steps, rtol=rtol,
                                  atol=atol, progress=progress, desc=name, target_cost=target_cost,
                                  stall_rtol=stall_rtol,
                                  stop_when=stop_when)
    base, params, cost, open_ver, fb_info = problem, final.params, final.cost, None, None
    if isinstance(problem, MultipleShooting) or feedback is not None:
        fb_start = time.perf_counter()
        ms = problem if isinstance(problem, MultipleShooting) else None
        if ms is not None:
            base, params = ms.problem, ms.single_shooting_params(final.params)
        cost = Cost(*[t for t in final.cost.terms if not isinstance(t, Continuity)])
        nominal = design_xs = None
        if ms is not None:
            nominal = ms.feedback_nominal(final.params)
            design_xs = nominal[1][::FEEDBACK_REFINE]  # the segments at the design's sample times
        controller = tvlqr(base.model, base.control(params), base.initial_state(params), (0.0, base.horizon),
                           nominal=nominal, **(feedback or {}))
        ver = verify(base, cost, params, hold=hold, refine=refine, control=controller, design_xs=design_xs)
        try:
            open_ver = verify(base, cost, params, hold=hold, refine=refine).summary()
        except RuntimeError as e:  # the open-loop plan of an unstable motion may leave the shell
            open_ver = {"failed": str(e)}
        fb_info = {"kind": "TVLQR", "settings": {k: _setting(v) for k, v in (feedback or {}).items()},
                   "nominal": "multiple-shooting segments" if ms is not None else "open-loop solve",
                   "build_and_verify_time_s": time.perf_counter() - fb_start}
    else:
        ver = verify(final, hold=hold, refine=refine)
    m = ver.metrics | {"min_normal_verified": ver.contact["min_normal"]}
    goal_report = {}
    for label, (metric, limit) in (goals or {}).items():
        goal_report[label] = check_condition(m, metric, limit)._asdict()
    summary = {
        "experiment": description,
        "quick": quick,
        "horizon": base.horizon,
        "n_knots": base.n_knots,
        "control": base.control_kind,
        "free_masses": list(base.free_masses),
        "free_initial_angles": list(base.free_initial_angles),
        "x0": np.asarray(base.x0).tolist(),
        "method": f"{method} (optimistix/optax), exact derivatives through diffrax {type(base.solver).__name__}",
        "shooting": (f"multiple ({problem.n_segments} segments)" if isinstance(problem, MultipleShooting) else "single"),
        "solve_tolerance": float(base.rtol),
        "n_samples": base.n_samples,
        "stages": [r.summary() | {"params": None} for r in results],
        "iterations": final.iterations,
        "optimisation_wall_time_s": final.wall_time,
        "compile_time_s": final.compile_time,
        "initial_cost": float(final.history[0]),
        "final_cost": final.value,
        "cost_reduction": float(final.history[0] / max(final.value, 1e-300)),
        "cost_history": final.history,
        "design_metrics": final.metrics,
        "verification": ver.summary() | ({"closed_loop": fb_info} if fb_info else {}),
        "open_loop_verification": open_ver,
        "goals": goal_report,
        "params": {k: np.asarray(v).tolist() for k, v in final.params.items()},
    } | (extra or {})
    if plots:
        ends = list(np.cumsum([r.iterations for r in results])[:-1])
        write_figures(final, ver, out, title=title or name, stage_ends=ends)
    summary["total_wall_time_s"] = time.perf_counter() - start
    write_json(out / "summary.json", summary)
    return summary


def print_summary(name: str, s: dict[str, Any]) -> None:
    """One paragraph for the terminal: iterations, time, cost, verified goals."""
    v = s["verification"]
    print(f"{name}: {s['iterations']} iterations, {s['optimisation_wall_time_s']:.1f} s "
          f"(compile {s['compile_time_s']:.1f} s); cost {s['initial_cost']:.3e} -> {s['final_cost']:.3e}; "
          f"verified (SciPy DOP853 1e-12{', closed loop (TVLQR)' if v.get('closed_loop') else ''}): min N {v['contact']['min_normal']:.3f}, "
          f"max |F_t|/N {v['contact']['max_friction_ratio']:.3f}")
    for label, g in s["goals"].items():
        print(f"  {label}: {g['metric']} = {g['value']:.3e} ({g['relation']} {g['limit']:g}) {'met' if g['met'] else 'NOT met'}")
