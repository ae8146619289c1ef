"""The rolling ball as the paper's index-1 DAE (7.3), solved with SUNDIALS IDA.

The paper writes the ball's dynamics both as the ODE (7.2) and as the semi-explicit DAE

    𝓜 ẋ = g(t, x),    𝓜 = diag(1_{2n}, 0, 1_8)    (7.3), (7.5)

in which the q0 row of (7.2) is replaced by the algebraic constraint 0 = |q|² − 1: q0 is
an algebraic variable, q1, q2, q3 follow [½ q Ω♯]♭ and the other rows are those of (7.2).
:func:`solve_dae` hands IDA (variable-order BDF, via scikit-sundae) the residual

    F(t, x, ẋ) = 𝓜 ẋ − g(t, x)    (N,)

and its exact iteration matrix ∂F/∂x + c_j ∂F/∂ẋ = c_j 𝓜 − ∂g/∂x, where ∂g/∂x is the
forward-mode Jacobian of (7.2) (as :func:`rollball_jax.jacobians.state_jacobian`) with the
q0 row replaced by the constraint's gradient (0, …, 2q0, 2q1, 2q2, 2q3, 0, …). The
integration is restarted at the control's kink times and IDA is made to step exactly
onto every output time (``tstop``), so every returned state is a converged step end
(|q| = 1 to the Newton tolerance) rather than an interpolant.

Index and the q0 = 0 crossing. (7.3) is of index 1 only while ∂(|q|² − 1)/∂q0 = 2 q0 ≠ 0.
The paper's ball crosses q0 = 0 once, at t* ≈ 9.20669 (q0 goes from 1 to ≈ −0.48 at t = 20;
:func:`q0_crossings`). Near t* the constraint fixes q0 = ±√(1 − |q_v|²) from the integrated
q_v = (q1, q2, q3), so an error δ in q_v becomes an error ≈ δ/|q0| in q0 (and where the
integrated |q_v| exceeds 1 the constraint has no real root at all), and the iteration matrix
c_j 𝓜 − ∂g/∂x tends to singular as the step shrinks (the Schur complement on the q0 row is
2 q0 + O(1/c_j)). Observed with IDA and the exact Jacobian on the paper example
(rtol = atol): before t* it agrees with (7.2) (6.5e-10 at 1e-12 on [0, 9]; |q| − 1 ≤ 1.2e-13);
at t* either the step size collapses and the corrector fails (h → 1e-314 at 1e-10 with the
reference output times; "mxstep" at 1e-12 after crossing), or a large step happens to
jump across and the solution carries on silently wrong (at t = 20: 6e-5 off at 1e-8,
4.8e-4 at 1e-9, 1.7e-4 at 1e-10 — 4–6 orders of magnitude above the tolerance). Therefore
with ``algebraic="q0"`` (the paper's (7.3), the default) :func:`solve_dae` stops with a
:class:`~rollball_jax.errors.SimulationError` when q0 reaches 0 (an IDA event), or
reports the cause when IDA fails just before. ``algebraic="largest"`` solves the
equivalent, everywhere well-posed DAE in which the constraint replaces the row of the
q_k of largest modulus (≥ 1/2 for a unit versor), switched by an IDA event when that
|q_k| falls below 1/4 (restart from the event state): paper ball over [0, 20] at
1e-12, 8e-10 from (7.2) with |q| − 1 ≤ 5e-13, algebraic variable q0 → q1 → q3.

scikit-sundae is an optional dependency (``pip install scikit-sundae``); it is imported
on first use.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ._typing import FloatInput, RealScalar, TimeSpan

from .controls import AbstractControl
from .errors import ModelError, SimulationError
from .models import Ball
from .scipy_bridge import check_inputs, compiled_functions, split_at_kinks

__all__ = ["DAEResult", "solve_dae", "dae_mass_matrix", "dae_residual", "dae_iteration_matrix", "q0_crossings"]


def _versor_start(model) -> int:
    if not isinstance(model, Ball):
        raise ModelError(f"the DAE (7.3) is the ball's; got a {type(model).__name__}")
    return 2 * model.n


def dae_mass_matrix(model: Ball, algebraic: int | None = None) -> np.ndarray:
    """Diagonal of 𝓜 (7.5), shape ``(N,)``: ones, with 0 at the algebraic variable (default q0, index 2n)."""
    k = _versor_start(model) if algebraic is None else int(algebraic)
    m = np.ones(model.state_size)
    m[k] = 0.0
    return m


def _g(f, x, k, start):
    """g(t, x) of (7.3) from f(t, x) of (7.2): row k becomes |q|² − 1."""
    g = np.array(f, dtype=np.float64)
    q = x[start : start + 4]
    g[k] = q @ q - 1.0
    return g


def _g_jacobian(jac, x, k, start):
    """∂g/∂x: ∂f/∂x with row k replaced by the constraint's gradient 2q."""
    jg = np.array(jac, dtype=np.float64)
    jg[k, :] = 0.0
    jg[k, start : start + 4] = 2.0 * x[start : start + 4]
    return jg


def dae_residual(model: Ball, control: AbstractControl, t, x, x_dot, algebraic: int | None = None) -> np.ndarray:
    """F(t, x, ẋ) = 𝓜 ẋ − g(t, x) of (7.3), shape ``(N,)`` (NumPy; for checks and tests)."""
    start = _versor_start(model)
    k = start if algebraic is None else int(algebraic)
    p, fns = compiled_functions(model, control)
    x = np.asarray(x, dtype=np.float64)
    f = np.asarray(fns.vector_field(p, np.float64(t), x))
    return dae_mass_matrix(model, k) * np.asarray(x_dot, dtype=np.float64) - _g(f, x, k, start)


def dae_iteration_matrix(model: Ball, control: AbstractControl, t, x, cj: float, algebraic: int | None = None) -> np.ndarray:
    """IDA's iteration matrix ∂F/∂x + c_j ∂F/∂ẋ = c_j 𝓜 − ∂g/∂x, shape ``(N, N)`` (exact)."""
    start = _versor_start(model)
    k = start if algebraic is None else int(algebraic)
    p, fns = compiled_functions(model, control)
    x = np.asarray(x, dtype=np.float64)
    jac = np.asarray(fns.state_jacobian(p, np.float64(t), x))
    return np.diag(cj * dae_mass_matrix(model, k)) - _g_jacobian(jac, x, k, start)


_IDA_ROOT_RETURN = 2
# "largest": switch the algebraic variable when its |q_k| falls below this (the largest
# |q_j| of a unit versor is >= 1/2, so the new one is >= 1/2: hysteresis of a factor 2)
_SWITCH_BELOW = 0.25


def _make_ida(vf, jac_fn, p, k, start, mass, switching, rtol, atol, max_num_steps, options):
    """An IDA instance for the DAE with algebraic variable ``x[k]`` (exact Jacobian).

    One terminal event: q_k² − 1/16 decreasing through 0 (``switching``), or q0 crossing 0
    (the paper's choice, where (7.3) stops being of index 1).
    """
    from sksundae.ida import IDA

    diag = np.nonzero(mass)[0]  # differential rows

    def resfn(t, y, yp, res):
        f = np.asarray(vf(p, np.float64(t), np.array(y)))
        res[:] = mass * yp - _g(f, y, k, start)

    def jacfn(t, y, yp, res, cj, JJ):
        jac = np.asarray(jac_fn(p, np.float64(t), np.array(y)))
        JJ[:, :] = -_g_jacobian(jac, y, k, start)
        JJ[diag, diag] += cj  # c_j 𝓜 (no inf·0 = nan on the algebraic row if c_j overflows)

    if switching:
        def eventsfn(t, y, yp, events):
            events[0] = y[k] * y[k] - _SWITCH_BELOW**2

        eventsfn.direction = [-1]
    else:
        def eventsfn(t, y, yp, events):
            events[0] = y[k]

        eventsfn.direction = [0]
    eventsfn.terminal = [True]
    kwargs = dict(options)
    kwargs.update(eventsfn=eventsfn, num_events=1)
    return IDA(resfn, jacfn=jacfn, algebraic_idx=[k], rtol=rtol, atol=atol, max_num_steps=int(max_num_steps), **kwargs)


@dataclasses.dataclass(frozen=True)
class DAEResult:
    """Trajectory from :func:`solve_dae`.

    ``ts`` ``(T,)``, ``xs`` ``(T, N)`` and ``x_dots`` ``(T, N)`` (IDA's ẋ; its q0 entry is
    IDA's derivative estimate of the algebraic variable), ``nfev`` (residual
    evaluations), ``njev`` (Jacobian evaluations), summed over the restarted segments;
    ``algebraic`` (index of the algebraic variable of each segment), ``rtol``, ``atol``,
    ``wall_time`` [s, includes compilation on first use].
    """

    ts: np.ndarray
    xs: np.ndarray
    x_dots: np.ndarray
    nfev: int
    njev: int
    algebraic: tuple[int, ...]
    rtol: float
    atol: float
    wall_time: float


def solve_dae(
    model: Ball,
    control: AbstractControl,
    x0: FloatInput[" N"],
    t_span: TimeSpan,
    t_eval: FloatInput[" T"] | None = None,
    *,
    rtol: RealScalar = 1e-10,
    atol: RealScalar = 1e-10,
    restart_at_kinks: bool = True,
    algebraic: str = "q0",
    max_num_steps: int = 100_000,
    **options,
) -> DAEResult:
    """Integrate the ball's DAE (7.3) with SUNDIALS IDA and the exact Jacobian.

    Parameters
    ----------
    model : Ball. control : AbstractControl.
    x0 : ``(N,)`` initial state (7.1) with |q| = 1 (consistent initial values; ẋ(t0) is
        taken from (7.2)).
    t_span : ``(t0, t1)``. t_eval : ``(T,)`` output times (default: t0, the kink times and t1).
    rtol, atol : IDA's tolerances (its error test includes the algebraic variable).
    restart_at_kinks : re-initialise IDA at the control's kink times (default).
    algebraic : ``"q0"`` — the paper's (7.3), q0 algebraic; raises when q0 reaches 0,
        where (7.3) stops being of index 1 — or ``"largest"`` — the q_k of largest |q_k|
        is algebraic, switched (with a restart) when it falls below 1/4 in modulus.
    max_num_steps : IDA's step limit per output interval.
    **options : passed to ``sksundae.ida.IDA`` (e.g. ``max_step``, ``max_order``).

    Returns a :class:`DAEResult`.

    Raises
    ------
    ModelError : not a Ball, bad x0/t_span/t_eval, |q| not ≈ 1, q0 ≈ 0 with
        ``algebraic="q0"``, unknown ``algebraic``.
    SimulationError : IDA failed (message and ``t_reached`` from IDA; a hint when the
        algebraic q_k is near 0), or q0 reached 0 with ``algebraic="q0"``.
    ImportError : scikit-sundae is not installed.
    """
    import sksundae.ida  # noqa: F401  (fail early when scikit-sundae is missing)

    start = _versor_start(model)
    x0, t0, t1, t_eval = check_inputs(model, x0, t_span, t_eval)
    if abs(np.linalg.norm(x0[start : start + 4]) - 1.0) > 1e-8:
        raise ModelError(f"x0's versor must have unit length (consistent initial values); |q| = {np.linalg.norm(x0[start:start + 4]):.12g}")
    if algebraic not in ("q0", "largest"):
        raise ModelError(f"algebraic must be 'q0' (paper's 7.3) or 'largest'; got {algebraic!r}")
    if algebraic == "q0" and abs(x0[start]) < 1e-6:
        raise ModelError("x0 has q0 ≈ 0, where the paper's DAE (7.3) is singular; use algebraic='largest'")
    p, fns = compiled_functions(model, control)
    vf, jac_fn = fns.vector_field, fns.state_jacobian
    segments = split_at_kinks(control, t0, t1, restart_at_kinks)
    if t_eval is None:
        t_eval = np.array([t0] + [b for _, b in segments])

    start_time = time.perf_counter()
    ts_out, xs_out, xds_out, alg_used = [], [], [], []
    nfev = njev = 0
    x = x0
    for seg, (a, b) in enumerate(segments):
        lo = t_eval >= a if seg == 0 else t_eval > a
        requested = t_eval[lo & (t_eval <= b)]
        stops = np.unique(np.append(requested, b))
        values = {}
        if seg == 0 and requested.size and requested[0] == a:
            values[a] = (x.copy(), np.asarray(vf(p, np.float64(a), x)))
        t = a
        while t < b:
            # (re)start IDA at t: q0 algebraic (7.3), or the largest |q_k| ("largest")
            k = start if algebraic == "q0" else start + int(np.argmax(np.abs(x[start : start + 4])))
            alg_used.append(k)
            solver = _make_ida(vf, jac_fn, p, k, start, dae_mass_matrix(model, k), algebraic == "largest",
                               rtol, atol, max_num_steps, options)
            xd = np.asarray(vf(p, np.float64(t), x))  # consistent ẋ(t) from (7.2)
            init = solver.init_step(t, x, xd)
            if not init.success:
                raise SimulationError(f"IDA could not start at t = {t:.9g}: {init.message}", t_reached=t, cause=str(init.message))
            last = init
            for tout in stops[stops > t]:
                res = solver.step(float(tout), tstop=float(tout))
                last = res
                if not res.success:
                    t_reached = float(np.atleast_1d(res.t)[-1])
                    q_k = float(np.array(res.y).reshape(-1)[k])
                    hint = (
                        f" |q_k| = {abs(q_k):.2g} here: (7.3) is singular where the algebraic q_k = 0 "
                        "(its constraint derivative 2 q_k vanishes); try algebraic='largest'"
                        if abs(q_k) < 0.1 else ""
                    )
                    raise SimulationError(
                        f"IDA failed on [{a:g}, {b:g}] at t = {t_reached:.9g} (algebraic variable: state index {k}): "
                        f"{res.message} (rtol={rtol:g}, atol={atol:g}).{hint}",
                        t_reached=t_reached,
                        cause=str(res.message),
                    )
                t = float(np.atleast_1d(res.t)[-1])
                x = np.array(res.y).reshape(-1)
                if t == tout:
                    values[float(tout)] = (x, np.array(res.yp).reshape(-1))
                if res.status == _IDA_ROOT_RETURN:
                    if algebraic == "q0":
                        raise SimulationError(
                            f"q0 crosses 0 at t = {t:.9g}: the paper's DAE (7.3) is not of index 1 there "
                            "(the constraint |q|² − 1 = 0 has derivative 2 q0 = 0 with respect to its "
                            "algebraic variable q0), and IDA's steps collapse or its results lose accuracy "
                            "past this point; use algebraic='largest' (or the ODE 7.2)",
                            t_reached=t,
                            cause="q0 = 0: DAE (7.3) singular",
                        )
                    # |q_k| fell below 1/4: restart with another algebraic variable, from the
                    # event state (IDA's interpolant) put back onto |q| = 1
                    x = x.copy()
                    x[start : start + 4] /= np.linalg.norm(x[start : start + 4])
                    break
            nfev += int(last.nfev)
            njev += int(last.njev)
            if not np.all(np.isfinite(x)):
                raise SimulationError(f"non-finite state by t = {t:.9g}", t_reached=a, cause="non-finite state")
        for tout in requested:
            y, yp = values[float(tout)]
            ts_out.append(float(tout))
            xs_out.append(y)
            xds_out.append(yp)
    ts = np.asarray(ts_out)
    xs = np.asarray(xs_out).reshape(-1, model.state_size)
    model.check_trajectory(ts, xs)
    return DAEResult(
        ts=ts, xs=xs, x_dots=np.asarray(xds_out).reshape(-1, model.state_size), nfev=nfev, njev=njev,
        algebraic=tuple(alg_used), rtol=float(rtol), atol=float(atol), wall_time=time.perf_counter() - start_time,
    )


def q0_crossings(ts: FloatInput[" T"], xs: FloatInput["T N"], model: Ball) -> np.ndarray:
    """Times (linearly interpolated) where q0 changes sign along a sampled trajectory ``(T,)``, ``(T, N)``."""
    start = _versor_start(model)
    ts = np.asarray(ts)
    q0 = np.asarray(xs)[:, start]
    idx = np.nonzero(np.signbit(q0[:-1]) != np.signbit(q0[1:]))[0]
    return ts[idx] - q0[idx] * (ts[idx + 1] - ts[idx]) / (q0[idx + 1] - q0[idx])
