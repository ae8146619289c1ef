"""SciPy ``solve_ivp`` driven by the JAX vector field and its exact Jacobian.

The paper integrates (6.2) and (7.2) with MATLAB's ode15s/ode23t/ode23tb and the Fortran
radau5, supplying the Jacobian ∂f/∂x obtained by complex-step differentiation (sec. 6, 7).
:func:`solve_with_scipy` does the same with SciPy's ``Radau`` (radau5's method), ``BDF``
(ode15s's family), ``LSODA`` or the explicit ``DOP853``/``RK45``/``RK23``, handing them
the jit-compiled vector field and its exact forward-mode Jacobian ∂f/∂x (the matrix of
:func:`rollball_jax.jacobians.state_jacobian`) as NumPy-in/NumPy-out callables.

As in :func:`rollball_jax.simulate`, the integration is restarted at the control's kink
times (stepping across the kinks of (6.6)/(7.11) costs a high-order
method its order).

Host integrators call f(t, x) thousands of times, so the per-call overhead matters: the
array leaves of ``(model, control)`` are flattened into one float64 vector ``p`` and the
functions are ``jax.jit``-compiled with signature ``(p, t, x)`` (~15–20 µs a call here,
against ~100 µs for an ``eqx.filter_jit`` call, which re-flattens the model every time).
The compiled functions are cached per model/control structure: a second solve with new
parameter values does not recompile. SciPy is imported on first use (it is an optional
dependency).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from . import _checks as checks
from ._typing import FloatInput, RealScalar, TimeSpan

from .controls import AbstractControl
from .errors import ModelError, SimulationError
from .models import AbstractModel

__all__ = ["ScipyResult", "solve_with_scipy", "numpy_functions", "IMPLICIT_METHODS"]

#: SciPy methods that use the Jacobian (it is passed to these only).
IMPLICIT_METHODS = ("Radau", "BDF", "LSODA")

# ---------------------------------------------------------------------------------------
# NumPy-in/NumPy-out compiled functions (also used by rollball_jax.dae)

_CACHE: collections.OrderedDict = collections.OrderedDict()
_CACHE_SIZE = 32


@dataclasses.dataclass(frozen=True)
class CompiledFunctions:
    """``jax.jit``-compiled functions of ``(p, t, x)``, ``p`` the flattened parameters."""

    vector_field: Callable  # (p, t, x) -> f (N,)
    state_jacobian: Callable  # (p, t, x) -> ∂f/∂x (N, N), forward mode


def _build(unravel, static) -> CompiledFunctions:
    def f(p, t, x):
        model, control = eqx.combine(unravel(p), static)
        return model.vector_field(t, x, control)

    return CompiledFunctions(vector_field=jax.jit(f), state_jacobian=jax.jit(jax.jacfwd(f, argnums=2)))


def compiled_functions(model: AbstractModel, control: AbstractControl) -> tuple[np.ndarray, CompiledFunctions]:
    """``(p, fns)``: the flattened array leaves of ``(model, control)`` and the cached jitted functions."""
    dynamic, static = eqx.partition((model, control), eqx.is_array)
    p, unravel = ravel_pytree(dynamic)
    leaves, treedef = jax.tree_util.tree_flatten(dynamic)
    try:
        key = (treedef, tuple((np.shape(x), str(jnp.result_type(x))) for x in leaves), static)
        hash(key)
    except TypeError:  # unhashable static data (e.g. a dict of Python floats): compile afresh
        return np.asarray(p), _build(unravel, static)
    fns = _CACHE.get(key)
    if fns is None:
        fns = _CACHE[key] = _build(unravel, static)
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return np.asarray(p), fns


def numpy_functions(model: AbstractModel, control: AbstractControl) -> tuple[Callable, Callable]:
    """``(fun, jac)``: ``fun(t, x) -> f (N,)`` and ``jac(t, x) -> ∂f/∂x (N, N)`` on NumPy arrays.

    The signature ``solve_ivp`` expects. ``x`` is one state in the paper's order (7.1)/(6.1).
    """
    p, fns = compiled_functions(model, control)
    vf, jac = fns.vector_field, fns.state_jacobian

    def fun(t, x):
        return np.asarray(vf(p, np.float64(t), np.asarray(x, dtype=np.float64)))

    def jacobian(t, x):
        return np.asarray(jac(p, np.float64(t), np.asarray(x, dtype=np.float64)))

    return fun, jacobian


def split_at_kinks(control: AbstractControl, t0: float, t1: float, restart: bool = True) -> list[tuple[float, float]]:
    """Sub-intervals of ``[t0, t1]`` separated by the control's kink times strictly inside it."""
    if not restart:
        return [(t0, t1)]
    kinks = np.asarray(control.kink_times, dtype=np.float64).reshape(-1)
    inner = np.unique(kinks[(kinks > t0) & (kinks < t1)])
    edges = [t0, *inner.tolist(), t1]
    return list(zip(edges[:-1], edges[1:]))


def check_inputs(model, x0, t_span, t_eval):
    """Validate and convert ``(x0, t0, t1, t_eval)`` (raises ``ModelError``)."""
    if not isinstance(model, AbstractModel):
        raise ModelError(f"model must be a rollball_jax model (Ball, Disk, ...); got {type(model).__name__}")
    x0 = checks.state(model, x0)  # length, finite, the model's rules (unit versor, masses inside)
    t0, t1 = float(t_span[0]), float(t_span[1])
    if not t1 > t0:
        raise ModelError(f"t_span must satisfy t0 < t1; got {t_span}")
    if t_eval is not None:
        t_eval = np.asarray(t_eval, dtype=np.float64).reshape(-1)
        if t_eval.size == 0 or t_eval[0] < t0 or t_eval[-1] > t1 or np.any(np.diff(t_eval) < 0):
            raise ModelError("t_eval must be non-decreasing and lie within t_span")
    return x0, t0, t1, t_eval


# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ScipyResult:
    """Trajectory from :func:`solve_with_scipy`.

    ``ts`` ``(T,)``, ``xs`` ``(T, N)`` (paper's state order, time first); counters summed
    over the restarted segments: ``nfev`` (f evaluations), ``njev`` (Jacobian
    evaluations), ``nlu`` (LU decompositions); ``segments`` (number of restarts + 1),
    ``method``, ``rtol``, ``atol``, ``wall_time`` [s, includes compilation on first use].
    """

    ts: np.ndarray
    xs: np.ndarray
    nfev: int
    njev: int
    nlu: int
    segments: int
    method: str
    rtol: float
    atol: float
    wall_time: float


def solve_with_scipy(
    model: AbstractModel,
    control: AbstractControl,
    x0: FloatInput[" N"],
    t_span: TimeSpan,
    t_eval: FloatInput[" T"] | None = None,
    *,
    method: str = "Radau",
    rtol: RealScalar = 1e-10,
    atol: RealScalar = 1e-10,
    restart_at_kinks: bool = True,
    **options,
) -> ScipyResult:
    """Integrate (7.2) or (6.2) with ``scipy.integrate.solve_ivp`` and the exact Jacobian.

    Parameters
    ----------
    model, control : as for :func:`rollball_jax.simulate`.
    x0 : ``(N,)`` initial state, paper's order (7.1)/(6.1).
    t_span : ``(t0, t1)``.
    t_eval : ``(T,)`` output times within t_span (non-decreasing); ``None`` returns every
        accepted step (segment junctions once).
    method : any ``solve_ivp`` method; ``"Radau"``, ``"BDF"`` and ``"LSODA"`` receive the
        exact forward-mode Jacobian ∂f/∂x ``(N, N)``, explicit methods only f.
    rtol, atol : tolerances handed to SciPy.
    restart_at_kinks : restart the integration at the control's kink times (default).
    **options : passed on to ``solve_ivp`` (e.g. ``first_step``, ``max_step``).

    Returns a :class:`ScipyResult`.

    Raises
    ------
    ModelError : bad ``x0``, ``t_span`` or ``t_eval``.
    SimulationError : SciPy reports failure (``t_reached`` is the time it got to) or the
        state became non-finite.
    ImportError : SciPy is not installed.
    """
    from scipy.integrate import solve_ivp

    checks.control(control)  # a plain function raised "'function' object has no attribute 'kink_times'"
    x0, t0, t1, t_eval = check_inputs(model, x0, t_span, t_eval)
    fun, jac = numpy_functions(model, control)
    kwargs = dict(options)
    if method in IMPLICIT_METHODS:
        kwargs["jac"] = jac
    start = time.perf_counter()
    segments = split_at_kinks(control, t0, t1, restart_at_kinks)
    ts_out, xs_out = [], []
    nfev = njev = nlu = 0
    x = x0
    for k, (a, b) in enumerate(segments):
        if t_eval is None:
            seg_eval, wanted = None, None
        else:
            # a requested time equal to a junction belongs to the earlier segment (the state
            # is continuous there); b itself is always computed, to restart from it
            lo = t_eval >= a if k == 0 else t_eval > a
            requested = t_eval[lo & (t_eval <= b)]
            seg_eval = np.unique(np.append(requested, b))
            wanted = np.searchsorted(seg_eval, requested)
        sol = solve_ivp(fun, (a, b), x, method=method, t_eval=seg_eval, rtol=rtol, atol=atol, **kwargs)
        nfev += int(sol.nfev)
        njev += int(sol.njev)
        nlu += int(sol.nlu)
        if sol.status != 0:
            t_reached = float(sol.t[-1]) if sol.t.size else a
            raise SimulationError(
                f"solve_ivp({method}) failed on [{a:g}, {b:g}] at t = {t_reached:.9g}: {sol.message} "
                f"(rtol={rtol:g}, atol={atol:g})",
                t_reached=t_reached,
                cause=str(sol.message),
            )
        x = sol.y[:, -1]  # the state at b (a step end, or the dense output at b)
        if not np.all(np.isfinite(x)):
            raise SimulationError(f"non-finite state by t = {b:.9g}", t_reached=a, cause="non-finite state")
        if t_eval is None:
            keep = slice(0, None) if k == 0 else slice(1, None)  # junctions once
            ts_out.append(sol.t[keep])
            xs_out.append(sol.y.T[keep])
        else:
            ts_out.append(sol.t[wanted])
            xs_out.append(sol.y.T[wanted])
    ts = np.concatenate(ts_out)
    xs = np.concatenate(xs_out).reshape(-1, x0.shape[0])
    if not np.all(np.isfinite(xs)):
        bad = int(np.argmax(~np.all(np.isfinite(xs), axis=1)))
        raise SimulationError(f"non-finite state at t = {ts[bad]:.9g}", t_reached=float(ts[max(bad - 1, 0)]), cause="non-finite state")
    model.check_trajectory(ts, xs)
    return ScipyResult(
        ts=ts, xs=xs, nfev=nfev, njev=njev, nlu=nlu, segments=len(segments), method=method,
        rtol=float(rtol), atol=float(atol), wall_time=time.perf_counter() - start,
    )
