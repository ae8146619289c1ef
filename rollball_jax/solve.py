"""Solving: ``integrate`` (pure, jit/vmap/grad-able) and ``simulate`` (checked, with observables).

Defaults: diffrax ``Dopri8`` (explicit Runge–Kutta of order 8 with an embedded error
estimate), a PID step-size controller, and the control's kink times passed as jump
times so steps land exactly on them (stepping across the kinks of
(6.6)/(7.11) costs a high-order method its order).
"""

from __future__ import annotations

import dataclasses
import time
from functools import cached_property
from typing import Any

import diffrax as dfx
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ._typing import FloatInput, RealScalar, TimeSpan

from . import _checks as checks
from .controls import AbstractControl
from ._dispatch import COMPLEX_MESSAGE, array_jit
from ._executor import own_executor
from ._rejection_limit import RejectionLimit
from ._results import CODES, describe, raise_if_failed, result_code
from .errors import ModelError, SimulationError, host_only
from .models import AbstractModel

__all__ = [
    "simulate", "integrate", "Solution", "default_solver", "stepsize_controller", "DEFAULT_RTOL", "DEFAULT_ATOL",
    "DEFAULT_MAX_STEPS"
]

DEFAULT_RTOL = 1e-10
DEFAULT_ATOL = 1e-10
DEFAULT_MAX_STEPS = 100_000
DEFAULT_SAVE_POINTS = 401


_DOPRI8 = dfx.Dopri8()


def default_solver() -> dfx.AbstractSolver:
    """The default solver: ``diffrax.Dopri8()`` (one shared instance: a solver is an
    immutable module, and constructing one costs ~30 µs per ``simulate`` call)."""
    return _DOPRI8


def _term(model, control):
    field = own_executor(lambda t, x: model.vector_field(t, x, control))
    return dfx.ODETerm(lambda t, x, args: field(t, x))


def stepsize_controller(control: AbstractControl, rtol, atol, pcoeff=0.0, icoeff=1.0, dcoeff=0.0):
    """PID controller wrapped so that steps land on the control's kink times (jump times),
    and so that the solve ends (``max_steps_rejected``) after
    ``MAX_CONSECUTIVE_REJECTIONS`` (100) rejected steps in a row instead of spending
    ``max_steps`` on them (see :mod:`rollball_jax._rejection_limit`)."""
    pid = dfx.PIDController(rtol=rtol, atol=atol, pcoeff=pcoeff, icoeff=icoeff, dcoeff=dcoeff)
    kinks = control.kink_times
    if kinks is not None and kinks.shape[0] > 0:
        pid = dfx.ClipStepSizeController(pid, jump_ts=kinks)
    return RejectionLimit(pid)


def integrate(
    model: AbstractModel,
    control: AbstractControl,
    x0: FloatInput[" N"],
    ts: FloatInput[" T"],
    *,
    t0: float | Array | None = None,
    t1: float | Array | None = None,
    solver: dfx.AbstractSolver | None = None,
    rtol: float | Array = DEFAULT_RTOL,
    atol: float | Array = DEFAULT_ATOL,
    max_steps: int = DEFAULT_MAX_STEPS,
    dt0: float | Array | None = None,
    adjoint: dfx.AbstractAdjoint | None = None,
    throw: bool = False,
    event: dfx.Event | None = None,
) -> dfx.Solution:
    """Solve the model's ODE and return the raw ``diffrax.Solution`` (no input checks but a
    complex ``x0``, refused with ``ModelError``; the vector field refuses, while traced, a
    control for another number of masses).

    A pure function of its array arguments: use it under ``jax.jit``, ``jax.vmap`` and
    forward-mode autodiff (``jax.jvp``, ``jax.jacfwd``). ``ts`` ``(T,)`` are the save times
    (``t0``/``t1`` default to the first/last of them). The solution's ``result`` tells
    success; failed members carry ``inf`` after the failure time and NaN derivatives,
    unless ``throw=True`` (then a failed solve raises a runtime error, also under ``jit``
    and in derivatives, with the package's message for the result, e.g.
    ``max_steps_reached`` or ``max_steps_rejected``). ``solver`` default ``Dopri8``.
    ``sol.ys`` is the pair ``(states at ts (T, N), state at t1 (1, N))``. ``event``: a
    ``diffrax.Event`` that ends the solve (``simulate`` passes one that stops when a mass
    leaves the shell).

    ``adjoint`` default ``diffrax.ForwardMode()``: forward mode differentiates the steps
    the solve took (paper ball, ∂GC₁(200)/∂Ω₁(0) = 169 207: 2.0e-7 relative from the
    discrete adjoint's reverse gradient, which takes its own steps; tested), and reverse
    mode (``jax.grad``, ``jax.vjp``)
    raises a ``RuntimeError`` (when JAX transposes the solve) naming the routes that work:
    :func:`rollball_jax.trajectory`, :func:`rollball_jax.final_state`,
    :func:`rollball_jax.final_gc` (the exact discrete adjoint). (diffrax's
    ``BacksolveAdjoint`` does not take this function's ``SaveAt``; those functions accept
    ``adjoint="backsolve"``.) ``diffrax.RecursiveCheckpointAdjoint`` and
    ``diffrax.DirectAdjoint`` are refused (``ValueError``): their reverse-mode gradients
    are silently wrong with adaptive steps (through this function, the derivative above
    came out −916 029), see :data:`REFUSED_ADJOINTS`.

    Forward mode here differentiates diffrax's step sequence, which its step-size control
    chooses from the state alone: at or near an equilibrium the state's error estimate is
    ~0, the steps grow to the whole interval, and the derivative (an oscillation of the
    linearised motion) is not resolved, silently: hanging disk at rest,
    ∂φ(20)/∂φ̇(0) = 20.0037 against sin(ωT)/ω = 1.0892 at any tolerance. For derivatives
    use :func:`rollball_jax.final_state`, :func:`rollball_jax.trajectory` or
    :func:`rollball_jax.state_transition_matrix`, whose steps also resolve the linearised
    motion (derivative-aware step control: 1.0e-10 there at tol 1e-10 with the default
    tangent bound; ``docs/derivatives.md``). Complex ``x0`` raises
    ``ModelError`` (the cast to float64 would drop a complex step's imaginary part).
    """
    if jnp.iscomplexobj(x0):
        raise ModelError(COMPLEX_MESSAGE)
    ts = jnp.asarray(ts, dtype=jnp.float64)
    t0 = ts[0] if t0 is None else t0
    t1 = ts[-1] if t1 is None else t1
    solver = default_solver() if solver is None else solver
    adjoint = FORWARD_ONLY if adjoint is None else adjoint
    refused = refusal(adjoint)
    if refused is not None:
        raise ValueError(f"adjoint {type(adjoint).__name__} is refused: {refused}. {_REVERSE_ROUTES}")
    kwargs = {"adjoint": adjoint}
    if event is not None:
        kwargs["event"] = event
    sol = dfx.diffeqsolve(
        _term(model, control),
        solver,
        t0,
        t1,
        dt0,
        jnp.asarray(x0, dtype=jnp.float64),
        saveat=dfx.SaveAt(subs=[dfx.SubSaveAt(ts=ts), dfx.SubSaveAt(t1=True)]),
        stepsize_controller=stepsize_controller(control, jnp.asarray(rtol), jnp.asarray(atol)),
        max_steps=max_steps,
        throw=False,
        **kwargs,
    )
    if isinstance(adjoint, dfx.ForwardMode):
        # ForwardMode's while loop cannot be transposed; JAX's own error would name
        # lax.while_loop and none of the routes that work
        msg = f"rb.integrate differentiates in forward mode only (jax.jvp, jax.jacfwd) with adjoint=diffrax.ForwardMode(). {_REVERSE_ROUTES}"
        sol = eqx.tree_at(lambda s: (s.ts, s.ys), sol, eqxi.nondifferentiable_backward((sol.ts, sol.ys), msg=msg))
    return raise_if_failed(sol, throw)


#: Adjoint of ``integrate`` by default, and of the solves that are never differentiated
#: (``simulate``, ``simulate_batch``: their results leave as NumPy arrays). diffrax's own
#: default ``RecursiveCheckpointAdjoint`` builds its checkpointed loop for reverse mode
#: even when none follows; ``ForwardMode`` runs a plain loop. Measured (fresh process per
#: run, five alternating runs each, 2 cores): the same states, step counts and observables
#: bit for bit; first call of ``simulate_batch`` (``Adaptive``, paper ball, B = 4)
#: 2.10-2.43 -> 1.96-2.12 s; first call of ``rb.simulate`` (paper examples) unchanged
#: within run-to-run noise (±0.1 s). ``jax.jit(rb.integrate)`` (paper ball, [0, 20], tol
#: 1e-10, 2026-12-07): bit-identical, 0.200-0.205 ms with either adjoint.
FORWARD_ONLY = dfx.ForwardMode()

#: diffrax adjoints refused by :func:`integrate` and by the derivative functions
#: (:mod:`rollball_jax.sensitivity`), with the reason.
REFUSED_ADJOINTS = {
    dfx.RecursiveCheckpointAdjoint: "diffrax's RecursiveCheckpointAdjoint re-decides the steps when it recomputes a "
    "checkpointed segment, and on sensitive motions its gradient is silently wrong (O(1) on the paper ball at t = 200)",
    dfx.DirectAdjoint: "diffrax's DirectAdjoint with adaptive steps gives wrong reverse-mode gradients (4.6e-3 "
    "relative on the paper ball at t = 20)",
}


def refusal(adjoint) -> str | None:
    """Why ``adjoint`` (a diffrax adjoint object) is refused (:data:`REFUSED_ADJOINTS`), or
    ``None`` when it is not."""
    return next((why for kind, why in REFUSED_ADJOINTS.items() if isinstance(adjoint, kind)), None)


_REVERSE_ROUTES = ("For reverse mode (jax.grad, jax.vjp) use rb.trajectory, rb.final_state or rb.final_gc "
                   "(adjoint='discrete', their default: exact for the steps taken, at any horizon, forward and "
                   "reverse mode).")

#: Save counts up to this share one compiled ``rb.simulate`` program (see :func:`save_bucket`).
SAVE_BUCKET_MIN = 16
#: Save counts above this are compiled for exactly (see :func:`save_bucket`).
SAVE_BUCKET_MAX = 1024


def save_bucket(n: int) -> int:
    """The number of save times ``rb.simulate``'s compiled solve is built for, for ``n``
    requested ones. The number of save times is part of the compiled program's shape, so
    without buckets each count would compile its own program (~1 s). Counts are rounded up to
    ``SAVE_BUCKET_MIN`` (16), then to four buckets per doubling (17–20, 21–24, 25–28, 29–32,
    33–40, …, 897–1024: under 25 % more save times); the extra ones repeat the last save
    time and are dropped. Above ``SAVE_BUCKET_MAX`` (1024) the count is kept exactly: there
    the interpolation and transfer of the extra states would cost more than a compile
    saves (measured with power-of-two buckets: +45 % per call at 1,025 save times)."""
    n = int(n)
    if n <= SAVE_BUCKET_MIN:
        return SAVE_BUCKET_MIN
    if n > SAVE_BUCKET_MAX:
        return n
    step = 1 << ((n - 1).bit_length() - 3)
    return -(-n // step) * step


PROBE_OFFSETS = np.concatenate([[0.0], np.logspace(-15, -1, 15)])
_STAT_NAMES = ("num_steps", "num_accepted_steps", "num_rejected_steps")


@array_jit
def _integrate_jit(model, control, inputs, solver, max_steps, dt0):
    # One input array, ``inputs`` = (t0, t1, rtol, atol, x0 (N,), ts (T,)), N = model.state_size
    # (static), and one output array: each host-to-device or device-to-host transfer costs
    # ~15-30 µs of a ~1.5 ms call.
    n_x = model.state_size
    t0, t1, rtol, atol = inputs[0], inputs[1], inputs[2], inputs[3]
    x0, ts = inputs[4 : 4 + n_x], inputs[4 + n_x :]
    # Shape checks run once, while tracing (shapes are static).
    checks.control_output(model, control)
    field = lambda t, x: model.vector_field(t, x, control)
    f0 = field(t0, x0)
    ok0 = jnp.all(jnp.isfinite(f0))
    event = dfx.Event(lambda t, y, args, **kw: model.outside(y)) if model.n else None

    def run():
        sol = integrate(model, control, x0, ts, t0=t0, t1=t1, solver=solver, rtol=rtol, atol=atol,
                        max_steps=max_steps, dt0=dt0, event=event, adjoint=FORWARD_ONLY)
        ys, y_end = sol.ys
        stats = {k: jnp.asarray(sol.stats[k], jnp.int64) for k in _STAT_NAMES}
        return ys, sol.ts[1][-1], y_end[-1], result_code(sol.result), stats

    def skip():  # the vector field is not finite at the start: do not spend max_steps on it
        stats = {k: jnp.asarray(0, jnp.int64) for k in _STAT_NAMES}
        return jnp.full((ts.shape[0], x0.shape[0]), jnp.inf), t0, x0, jnp.asarray(-1, jnp.int32), stats

    ok0 = ok0 & ~model.outside(x0)  # a mass outside the shell at t0: refused after the call
    ys, t_end, y_end, code, stats = jax.lax.cond(ok0, run, skip)
    outside = jax.vmap(model.outside)(jnp.where(jnp.isfinite(ys), ys, 0.0))
    # One output array: the states at the save times and the final state, flattened, then
    # the scalars (step counts ≤ max_steps, result codes: exact in float64) and the flags.
    return jnp.concatenate([
        ys.reshape(-1), y_end,
        jnp.stack([t_end, code, *(stats[k] for k in _STAT_NAMES), model.outside(x0)]).astype(jnp.float64),
        outside.astype(jnp.float64),
    ])


def _probe_field(model, control, t_end, y_end):
    """Cause diagnosis of a failed solve: the vector field at the last state, at and just
    after the time reached (a field that turns non-finite makes the step size collapse
    there). Returns ``(probe_ts (P,), fields (P, N))``; ``batch`` vmaps it over members."""
    probe_ts = t_end + jnp.asarray(PROBE_OFFSETS) * (1.0 + jnp.abs(t_end))
    return probe_ts, jax.vmap(lambda t: model.vector_field(t, y_end, control))(probe_ts)


# Compiled and run only after a failure, not part of every call's program.
_field_probe = eqx.filter_jit(_probe_field)


def _nonfinite_field_message(model, probe_ts, probe) -> tuple[float, str] | None:
    """``(t, message)`` of the first non-finite vector-field probe, or None."""
    bad = ~np.all(np.isfinite(probe), axis=1)
    if not np.any(bad):
        return None
    k = int(np.argmax(bad))
    comp = int(np.argmax(~np.isfinite(probe[k])))
    labels = model.state_labels()
    t = float(probe_ts[k])
    return t, (f"vector field not finite at t = {t:.9g}, in component {comp} ({labels[comp]!r}): "
               "check the control, the force and the model parameters for NaN/inf or a singular value there")


@eqx.filter_jit
def _vmapped_observables(model, xs, context):
    return jax.vmap(lambda x: model.observables(x, **context))(xs)


@dataclasses.dataclass(frozen=True)
class Solution:
    """A checked trajectory with its derived observables (NumPy arrays, time first).

    Attributes: ``ts`` (T,), ``xs`` (T, N) states in the paper's order, ``model``,
    ``control``, ``stats`` (``num_steps``, ``num_accepted_steps``,
    ``num_rejected_steps``), ``wall_time`` [s, includes compilation on the first call],
    ``solver``, ``rtol``, ``atol``, ``context`` (constants of the observables, e.g. the
    disk's initial GC, 5.41). Observables are attributes computed on first use from
    ``model.observables``; for the ball and disk: ``gc``, ``contact_point``,
    ``orientation``, ``omega_body``, ``omega_spatial``, ``masses_body``,
    ``masses_spatial``, ``cm_body``, ``cm_spatial``, ``energy`` — see
    :func:`rollball_jax.observables.observables` for shapes and frames. States at save
    times between steps are dense-output interpolants (see
    :func:`rollball_jax.observables.energy` for what that means for conservation checks).
    """

    ts: np.ndarray
    xs: np.ndarray
    model: Any
    control: Any
    stats: dict
    wall_time: float
    solver: str
    rtol: float
    atol: float
    context: dict = dataclasses.field(default_factory=dict)

    @cached_property
    def observables(self) -> dict[str, np.ndarray]:
        """All observables of the model over time (arrays with time first)."""
        out = _vmapped_observables(self.model, self.xs, self.context)
        return {k: np.asarray(v) for k, v in out.items()}

    def __getattr__(self, name):
        if name.startswith("_") or name == "observables":
            raise AttributeError(name)
        obs_ = self.observables
        if name in obs_:
            return obs_[name]
        raise AttributeError(f"'Solution' has no attribute or observable '{name}'")

    @property
    def state_labels(self) -> list[str]:
        return self.model.state_labels()

    @property
    def n(self) -> int:
        return self.model.n

    @property
    def theta(self) -> np.ndarray:
        """Rail parameters θ ``(T, n)``."""
        return self.xs[:, : self.n]

    @property
    def theta_dot(self) -> np.ndarray:
        """Rail rates θ̇ ``(T, n)``."""
        return self.xs[:, self.n : 2 * self.n]

    @property
    def x_final(self) -> np.ndarray:
        return self.xs[-1]


@host_only("rb.simulate", "use rb.integrate (jax.jit, jax.vmap, forward mode) or, for derivatives, rb.trajectory, "
           "rb.final_state or rb.final_gc")
def simulate(
    model: AbstractModel,
    control: AbstractControl,
    x0: FloatInput[" N"],
    t_span: TimeSpan = (0.0, 20.0),
    *,
    ts: FloatInput[" T"] | None = None,
    n_save: int = DEFAULT_SAVE_POINTS,
    solver: dfx.AbstractSolver | None = None,
    rtol: RealScalar = DEFAULT_RTOL,
    atol: RealScalar = DEFAULT_ATOL,
    max_steps: int = DEFAULT_MAX_STEPS,
    dt0: RealScalar | None = None,
    z_a: float = 0.0,
) -> Solution:
    """Simulate ``model`` driven by ``control`` from ``x0`` over ``t_span``.

    Parameters
    ----------
    model : any AbstractModel (Ball, Disk, the rollball_jax.rigid models)
    control : AbstractControl giving θ̈(t) ``(n,)`` (n = model.n; ignored when n = 0).
    x0 : initial state in the paper's order, (7.1) for the ball, (6.1) for the disk.
    t_span : (t0, t1).
    ts : save times ``(T,)`` within t_span (default: ``n_save`` equally spaced points).
    solver, rtol, atol, max_steps, dt0 : passed to ``diffrax.diffeqsolve`` (default
        ``Dopri8``, 1e-10, 1e-10, 100 000, automatic initial step).
    z_a : disk only, initial GC position along e1 (5.41).

    Returns a :class:`Solution`. Compiles once per model structure (number and kinds of
    rails, control type, solver, ``max_steps``) and bucket of save counts
    (:func:`save_bucket`: 1–16, 17–20, 21–24, …); later calls with new values reuse it.

    Raises
    ------
    ModelError : a bad argument, named in the message: ``x0`` of the wrong length,
        non-finite, with a versor ``|q| ≠ 1`` (beyond ``checks.VERSOR_TOL`` = 1e-6; never
        normalised silently) or a mass outside the shell; ``control`` not a control or of
        the wrong size; ``rtol``/``atol`` not positive and finite; ``max_steps``/``n_save``
        not a positive integer; ``t_span``/``ts`` invalid; ``z_a`` not finite or given
        for a model other than a Disk; JAX switched to float32.
    SimulationError : the solver stopped early — the message names the time reached and
        the cause: ``max_steps`` reached or step size collapsed; the vector field not
        finite (with the time and the state component); a point mass leaving the shell
        (checked at every step end by a ``diffrax.Event``, and at the save times), or
        running off the end of a spoke rail.
    NotTraceableError : called under ``jax.jit``, ``jax.vmap`` or autodiff (its results are
        NumPy arrays); the message names :func:`integrate` and the derivative functions.
    """
    checks.require_x64("simulate")
    if not isinstance(model, AbstractModel):
        raise ModelError(f"'model' must be a rollball_jax model (Ball, Disk, ...); got {type(model).__name__}")
    checks.control(control)
    x0 = checks.state(model, x0, outside=False)  # the masses-inside check runs in the compiled call
    checks.tolerance(rtol, "rtol")
    checks.tolerance(atol, "atol")
    max_steps = checks.max_steps(max_steps)
    if dt0 is not None and not checks.finite_number(dt0, "dt0") > 0:
        raise ModelError(f"'dt0' must be positive; got {dt0}")
    if np.shape(t_span) != (2,):  # a third time was ignored, a number raised a TypeError
        raise ModelError(f"'t_span' must be (t0, t1); got {t_span!r}")
    t0, t1 = checks.finite_number(t_span[0], "t_span[0]"), checks.finite_number(t_span[1], "t_span[1]")
    if not t1 > t0:
        raise ModelError(f"t_span must satisfy t0 < t1; got {t_span}")
    checks.finite_number(z_a, "z_a")
    if z_a != 0.0 and not model.planar:  # it was ignored
        raise ModelError(f"'z_a' (the disk's initial GC position along e1, 5.41) is for a Disk; a "
                         f"{type(model).__name__}'s position is part of its state x0")
    if ts is None:
        checks.integer(n_save, "n_save")
    ts = np.linspace(t0, t1, n_save) if ts is None else np.asarray(ts, dtype=np.float64).reshape(-1)
    if ts.size == 0 or not np.all(np.isfinite(ts)) or ts[0] < t0 or ts[-1] > t1 or np.any(np.diff(ts) < 0):
        raise ModelError("save times 'ts' must be finite, non-decreasing and lie within t_span")
    solver = default_solver() if solver is None else solver
    checks.adaptive_solver(solver)
    start = time.perf_counter()
    # NumPy arrays (not Python floats) so that new values reuse the compiled solve.
    f64 = np.float64
    n_ts, n_x = ts.shape[0], x0.shape[0]
    n_pad = save_bucket(n_ts)  # the last save time repeated up to the bucket's size
    ts_in = ts if n_pad == n_ts else np.concatenate([ts, np.full(n_pad - n_ts, ts[-1])])
    out = np.asarray(_integrate_jit(
        model, control, np.concatenate([np.asarray([t0, t1, rtol, atol], f64), x0, ts_in]), solver,
        int(max_steps), None if dt0 is None else np.asarray(dt0, f64),
    ))
    wall = time.perf_counter() - start
    ys, y_end, info = out[: n_ts * n_x].reshape(n_ts, n_x), out[n_pad * n_x : (n_pad + 1) * n_x], out[(n_pad + 1) * n_x :]
    t_end, code = info[0], int(info[1])
    stats = {k: int(v) for k, v in zip(_STAT_NAMES, info[2:5])}
    outside0, outside = info[5] != 0.0, info[6 : 6 + n_ts] != 0.0
    if bool(outside0):
        model.check_state(x0, "x0")  # raises ModelError naming the mass
    if code != CODES["successful"]:
        t_reached = float(t_end)
        probe_ts, probe = jax.device_get(_field_probe(model, control, np.asarray(t_end), np.asarray(y_end)))
        field_bad = _nonfinite_field_message(model, probe_ts, probe)
        if code == CODES["event_occurred"]:
            # the saved states up to the event, then the event's: raises naming the mass and
            # the first save time where it was past a spoke's end (a mass can leave its spoke
            # well before it reaches the shell, which is what stops the solve)
            before = ts < t_reached
            model.check_trajectory(np.append(ts[before], t_reached), np.vstack([ys[before], np.asarray(y_end)[None]]))
        elif field_bad is not None:
            raise SimulationError(
                f"solve failed at t = {t_reached:.9g} of [{t0:g}, {t1:g}]: {field_bad[1]}",
                t_reached=t_reached, cause="non-finite vector field",
            )
        cause = _result_message(code)
        raise SimulationError(
            f"solve failed at t = {t_reached:.9g} of [{t0:g}, {t1:g}]: {cause} "
            f"(steps: {stats['num_accepted_steps']} accepted, {stats['num_rejected_steps']} rejected; "
            f"max_steps={max_steps}, rtol={rtol:g}, atol={atol:g})",
            t_reached=t_reached,
            cause=cause,
        )
    if not np.all(np.isfinite(ys)):
        bad = int(np.argmax(~np.all(np.isfinite(ys), axis=1)))
        raise SimulationError(
            f"non-finite state at t = {ts[bad]:.9g}", t_reached=float(ts[max(bad - 1, 0)]), cause="non-finite state"
        )
    # Methods looked up on the class: on an equinox module, ``model.method`` builds a bound-method
    # module (~20 µs each), a measurable share of a millisecond call.
    type(model).check_trajectory(model, ts, ys, outside=outside)
    return Solution(
        ts=ts, xs=ys, model=model, control=control, stats=stats, wall_time=wall,
        solver=type(solver).__name__, rtol=float(rtol), atol=float(atol),
        context=type(model).observable_context(model, x0, z_a=z_a),
    )


def _result_message(code: int) -> str:
    """Human-readable message of a result code (:mod:`rollball_jax._results`)."""
    return describe(code)
