"""Independent check of a design: re-simulate with SciPy and measure what was asked for.

The optimiser's numbers come from the differentiable diffrax solve it optimised through.
:func:`verify` re-integrates the optimised controls with a different integrator —
SciPy's ``solve_ivp`` with ``DOP853`` at rtol = atol = 1e-12 on the jit-compiled vector
field, restarted at every kink of the control (the knots) — on a
grid several times denser than the design's, and evaluates every cost term's metrics
(endpoint error, final speeds, tracking error, obstacle clearance, speed/acceleration
and contact-force margins) on that trajectory. Optionally it keeps integrating for
``hold`` time units after T with the control at its end value, to show that a design
that "ends at rest" stays at rest.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .._typing import RealScalar
from .costs import Cost
from .problem import DesignProblem

__all__ = ["verify", "resimulate", "Verification"]

_COMPILED: dict = {}


def _numpy_vector_field(model, control):
    """``f(t, x)`` on NumPy arrays: the model's vector field jitted with signature (p, t, x)."""
    dynamic, static = eqx.partition((model, control), eqx.is_array)
    p, unravel = ravel_pytree(dynamic)
    leaves, treedef = jax.tree_util.tree_flatten(dynamic)
    key = (treedef, tuple(np.shape(x) for x in leaves), static)
    try:
        fn = _COMPILED.get(key)
    except TypeError:  # unhashable static data
        key, fn = None, None
    if fn is None:
        def f(p_, t, x):
            m, c = eqx.combine(unravel(p_), static)
            return m.vector_field(t, x, c)

        fn = jax.jit(f)
        if key is not None:
            _COMPILED[key] = fn
    p = np.asarray(p)
    return lambda t, x: np.asarray(fn(p, np.float64(t), np.asarray(x, dtype=np.float64)))


def resimulate(
    problem: DesignProblem,
    params,
    ts: np.ndarray | None = None,
    *,
    refine: int = 8,
    t_end: float | None = None,
    rtol: RealScalar = 1e-12,
    atol: RealScalar = 1e-12,
    method: str = "DOP853",
    control=None,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Integrate the design's controls from its initial state with ``scipy.integrate.solve_ivp``.

    Output times ``ts`` (default: the design's sample grid refined ``refine`` times, so it
    contains the design's sample times) on [0, ``t_end``] (default the horizon). The
    integration restarts at every knot (kink of u). Returns ``(ts, xs (T, N), info)`` with
    ``info`` = ``nfev``, ``segments``, ``wall_time``. ``control``: integrate under this
    control instead of the design's (e.g. a closed-loop
    :class:`~rollball_jax.design.feedback.TVLQRControl` around it); restarts at its kinks.
    """
    from scipy.integrate import solve_ivp

    t_end = problem.horizon if t_end is None else float(t_end)
    if ts is None:
        ts = np.linspace(0.0, problem.horizon, (problem.n_samples - 1) * refine + 1)
        if t_end > problem.horizon:
            extra = np.linspace(problem.horizon, t_end, max(2, int(round((t_end - problem.horizon) / (ts[1] - ts[0]))) + 1))
            ts = np.concatenate([ts, extra[1:]])
    ts = np.asarray(ts, dtype=np.float64)
    control = problem.control(params) if control is None else control
    fun = _numpy_vector_field(problem.model, control)
    knots = np.asarray(control.kink_times)
    edges = np.unique(np.concatenate([[0.0], knots[(knots > 0.0) & (knots < t_end)], [t_end]]))
    x = np.asarray(problem.initial_state(params), dtype=np.float64)
    out = np.empty((ts.size, x.size))
    start = time.perf_counter()
    nfev = 0
    for k, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
        sel = (ts >= a) & (ts <= b) if k == 0 else (ts > a) & (ts <= b)
        t_eval = np.unique(np.concatenate([ts[sel], [b]]))
        sol = solve_ivp(fun, (a, b), x, method=method, t_eval=t_eval, rtol=rtol, atol=atol)
        if sol.status != 0:
            raise RuntimeError(f"solve_ivp({method}) failed on [{a:g}, {b:g}]: {sol.message}")
        nfev += int(sol.nfev)
        out[sel] = sol.y.T[np.searchsorted(t_eval, ts[sel])]
        x = sol.y[:, -1]
    info = {"nfev": nfev, "segments": len(edges) - 1, "wall_time": time.perf_counter() - start,
            "method": method, "rtol": rtol, "atol": atol}
    return ts, out, info


@eqx.filter_jit
def _measure(problem, cost, params, ts, xs, control=None):
    ev = problem.wrap(params, ts, xs)
    # contact forces need the actual θ̈ = control(t, x): the closed loop's when verifying one
    if control is None:
        ev = ev.with_contact()  # one copy for the metrics, the cost and the returned forces
        cf = ev.contact()
    else:
        cf = eqx.tree_at(lambda e: e.control, ev, control).contact()
    value, _, metrics = cost.report(ev)
    return metrics, value, cf.normal, cf.friction_ratio, ev.gc


@dataclasses.dataclass
class Verification:
    """Result of :func:`verify` (all NumPy / Python floats).

    ``ts``, ``xs``: SciPy trajectory on the dense grid (0…T); ``metrics``: every cost
    term's metrics on it (the *true* endpoint error, final speed, tracking error,
    clearance, margins); ``contact``: ``min_normal``, ``max_friction_ratio``;
    ``max_state_difference``: max |x_design − x_scipy| at the design's sample times;
    ``hold``: after T with the control held at its end value (``duration``,
    ``gc_drift`` = max |z_GC(t) − z_GC(T)|, ``max_speed``), when requested; ``info``:
    solver counters and wall time; ``gc`` (T, 2), ``normal`` (T,), ``friction_ratio`` (T,)
    along the dense trajectory (for plots).
    """

    ts: np.ndarray
    xs: np.ndarray
    gc: np.ndarray
    normal: np.ndarray
    friction_ratio: np.ndarray
    metrics: dict[str, float]
    cost: float
    contact: dict[str, float]
    max_state_difference: float
    hold: dict[str, float] | None
    info: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        return {
            "method": f"{self.info['method']} rtol={self.info['rtol']:g} atol={self.info['atol']:g}, restarted at knots",
            "n_points": int(self.ts.size),
            "metrics": self.metrics,
            "cost_on_dense_grid": self.cost,
            "contact": self.contact,
            "max_state_difference_vs_design_solve": self.max_state_difference,
            "hold": self.hold,
            "nfev": self.info["nfev"],
            "wall_time_s": self.info["wall_time"],
        }


def verify(result_or_problem, cost: Cost | None = None, params=None, *, refine: int = 8, hold: float = 0.0,
           rtol: RealScalar = 1e-12, atol: RealScalar = 1e-12, design_xs: np.ndarray | None = None,
           control=None) -> Verification:
    """Re-simulate a design independently and report its true figures.

    Call as ``verify(result)`` with a :class:`~.optimize.DesignResult`, or
    ``verify(problem, cost, params)``. ``refine``: the dense grid is the design grid
    refined this many times. ``hold`` > 0: continue that long after T with the control
    held at its end value and report the drift. ``control``: re-simulate under this
    control instead (closed-loop verification, e.g. a
    :class:`~rollball_jax.design.feedback.TVLQRControl` around the design); the state
    metrics (tracking, endpoint, clearance) and ``Verification.contact`` / ``normal`` /
    ``friction_ratio`` (contact forces with the closed loop's θ̈ = control(t, x)) are those
    of the closed loop, while the cost terms' control and contact metrics (effort,
    acceleration bounds, ``ContactFeasibility``'s ``min_normal`` …) use the design's
    open-loop θ̈ along the closed-loop states (they evaluate the control without a state).
    """
    if cost is None:
        res = result_or_problem
        problem, cost, params, design_xs = res.problem, res.cost, res.params, res.xs
    else:
        problem = result_or_problem
    t_end = problem.horizon + max(0.0, float(hold))
    ts, xs, info = resimulate(problem, params, refine=refine, t_end=t_end, rtol=rtol, atol=atol, control=control)
    inside = ts <= problem.horizon + 1e-12
    ts_d, xs_d = ts[inside], xs[inside]
    metrics, value, normal, ratio, gc = _measure(problem, cost, params, jnp.asarray(ts_d), jnp.asarray(xs_d), control)
    normal, ratio = np.asarray(normal), np.asarray(ratio)
    diff = float("nan")
    if design_xs is not None:
        diff = float(np.max(np.abs(xs_d[::refine] - np.asarray(design_xs))))
    hold_info = None
    if hold > 0:
        ts_h, xs_h = ts[~inside | (ts == ts_d[-1])], xs[~inside | (ts == ts_d[-1])]
        *_, gc_h = _measure(problem, cost, params, jnp.asarray(ts_h), jnp.asarray(xs_h))
        gc_h = np.asarray(gc_h)
        speed = np.linalg.norm(np.diff(gc_h, axis=0), axis=1) / np.diff(ts_h)
        hold_info = {"duration": float(hold), "gc_drift": float(np.max(np.linalg.norm(gc_h - gc_h[0], axis=1))),
                     "max_speed": float(np.max(speed)) if speed.size else 0.0}
    return Verification(
        ts=ts_d, xs=xs_d, gc=np.asarray(gc), normal=normal, friction_ratio=ratio,
        metrics={k: float(v) for k, v in metrics.items()}, cost=float(value),
        contact={"min_normal": float(normal.min()), "max_friction_ratio": float(ratio.max())},
        max_state_difference=diff, hold=hold_info, info=info,
    )
