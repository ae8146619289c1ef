"""Derivatives through whole trajectories: differentiable solves, functionals, adjoints.

Every function here is a pure function of ``(model, control, x0)`` (pytrees), so
``jax.grad``/``jax.jacrev``/``jax.jacfwd`` (or ``eqx.filter_grad`` for whole models)
give exact derivatives of the *discretised* solve with respect to every array
parameter: masses, rail radii/shapes/orientations/centres, moments of inertia, χ0, r,
g, the initial state and control parameters (spline knot values). To differentiate
with respect to a derived parametrisation (e.g. the spherical angles ``v`` of
:meth:`CircleRail.paper`), build the model inside the differentiated function.

Adjoints (``adjoint=``):

* ``"discrete"`` (default) — the discrete adjoint of :mod:`rollball_jax._discrete_adjoint`:
  the forward pass records its accepted steps, the derivative replays exactly those
  steps. Exact derivative of the computed discrete map at any horizon, in forward mode,
  reverse mode and any nesting of them (``jax.hessian``, Hessian-vector products,
  ``jacrev∘jacrev``). The step-size control also sees the derivative, so the steps
  resolve the linearised motion even where the state itself is at rest (an
  equilibrium): by default (``tangent_control="bound"``) through a bound from the
  Jacobian's spectral radius, one field evaluation a step; ``tangent_control="tangent"``
  carries one probe tangent of the variational equation and tests its error too (a
  reverse gradient ~1.4× dearer, but fewer steps on models with fast damping).
  Explicit Runge–Kutta solvers only (Dopri8, Tsit5, Dopri5, ...). Save times are step
  stops (states there are step ends), or with ``dense=True`` the solver's dense output
  on the steps of a solve to the last one (cheaper for many save times). Memory: ~3 numbers per step plus one state per
  16 steps; ``max_steps`` (default 4096) sizes the buffers and a longer solve raises an
  error naming it.
* ``"forward"`` — the same discrete adjoint (kept for compatibility: it is the right
  choice for forward mode too).
* ``"recursive"`` — diffrax ``RecursiveCheckpointAdjoint`` with diffrax's own step-size
  control. **Refused**: its checkpointed recomputation re-decides the steps, and on
  sensitive motions (paper ball, t = 200) its gradient is O(1) wrong.
* ``"direct"`` — diffrax ``DirectAdjoint``. **Refused**: with adaptive steps its
  reverse-mode gradient is wrong (4.6e-3 relative on the paper ball at t = 20).
* ``"backsolve"`` — diffrax ``BacksolveAdjoint``: solves the continuous adjoint ODE
  backwards in time. Its gradient is that of the continuous problem with an independent
  error (*not* the derivative of what the forward solve computed), it re-integrates the
  state backwards (error growth on unstable motions), costs an extra solve, is
  reverse-mode only (forward mode raises a ``TypeError`` naming ``"discrete"``) and
  ignores ``tangent_control``.

What is differentiated: every inexact array leaf of ``model`` and ``control`` and
``x0``, and the start and save times (``ts``, ``t_span``), through the ODE's identities
∂x(t_k)/∂t_k = f(t_k, x(t_k)) and ∂x(t_k)/∂t0 = −Φ(t_k, t0) f(t0, x0)
(:mod:`rollball_jax._time_tangents`; forward and reverse mode; a derivative with respect to
a time of another derivative raises ``NotImplementedError``). Kink times of controls (jump
times) are constants: their derivative is zero by construction (a step boundary does not
move with them).
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._typing import FloatInput, RealScalar, TimeSpan

from . import _discrete_adjoint as discrete_adjoint
from ._dispatch import float64_arg
from ._results import raise_if_failed
from ._time_tangents import with_time_derivatives
from .errors import ModelError, concrete
from .solve import DEFAULT_ATOL, DEFAULT_RTOL, REFUSED_ADJOINTS, default_solver, refusal, stepsize_controller

__all__ = [
    "trajectory", "final_state", "final_gc", "gc_position", "distance_to_target", "running_cost",
    "state_transition_matrix", "resolve_adjoint", "ADJOINTS"
]

ADJOINTS = ("discrete", "forward", "backsolve")
REFUSED = {"recursive": REFUSED_ADJOINTS[dfx.RecursiveCheckpointAdjoint], "direct": REFUSED_ADJOINTS[dfx.DirectAdjoint]}
DERIVATIVE_MAX_STEPS = discrete_adjoint.DEFAULT_MAX_STEPS


def resolve_adjoint(adjoint: str | dfx.AbstractAdjoint = "discrete", checkpoints: int | None = None) -> str | dfx.AbstractAdjoint:
    """Check an adjoint name (see module docstring): returns ``"discrete"`` or a diffrax adjoint.

    Raises ``ValueError`` for a refused or unknown name, naming the ones that work.
    ``checkpoints`` is accepted for compatibility and ignored (the discrete adjoint
    needs no checkpoint count).
    """
    del checkpoints
    refused = refusal(adjoint)
    if refused is not None:
        raise ValueError(f"adjoint {type(adjoint).__name__} is refused: {refused}; "
                         f"use adjoint='discrete' (exact, forward and reverse mode, any order)")
    if isinstance(adjoint, dfx.BacksolveAdjoint):
        return adjoint
    if isinstance(adjoint, dfx.AbstractAdjoint):
        raise ValueError(f"adjoint {type(adjoint).__name__} is not supported here; choose one of {ADJOINTS}")
    if adjoint in ("discrete", "forward"):
        return "discrete"
    if adjoint == "backsolve":
        return dfx.BacksolveAdjoint()
    if adjoint in REFUSED:
        raise ValueError(f"adjoint={adjoint!r} is refused: {REFUSED[adjoint]}; use adjoint='discrete' "
                         "(exact for the steps taken, forward and reverse mode, any order)")
    raise ValueError(f"unknown adjoint {adjoint!r}; choose one of {ADJOINTS}")


def trajectory(
    model,
    control,
    x0: FloatInput[" N"],
    ts: FloatInput[" T"],
    *,
    solver: dfx.AbstractSolver | None = None,
    rtol: RealScalar = DEFAULT_RTOL,
    atol: RealScalar = DEFAULT_ATOL,
    max_steps: int = DERIVATIVE_MAX_STEPS,
    adjoint: str | dfx.AbstractAdjoint = "discrete",
    checkpoints: int | None = None,
    tangent_control: bool | str = discrete_adjoint.DEFAULT_TANGENT_CONTROL,
    dtmax: RealScalar | None = None,
    throw: bool = True,
    dense: bool = False,
) -> Float[Array, "T N"]:
    """States at the save times ``ts`` ``(T,)`` (``t0 = ts[0]``, strictly increasing), shape ``(T, N)``.

    Differentiable in all inexact array leaves of ``model``, ``control`` and ``x0``
    (see the module docstring for ``adjoint``). The save times are step stops, so the
    states there are step ends of the differentiated discrete map; with ``dense=True``
    they are not (only ``ts[-1]`` is): the states there are the solver's dense output on
    the steps of a solve to ``ts[-1]``, accurate to about the tolerance and much cheaper
    for many save times (see :func:`rollball_jax._discrete_adjoint.solve`; the
    ``"backsolve"`` route always saves by diffrax's dense output). ``tangent_control``:
    step control that also sees the derivative (needed for derivatives from an
    equilibrium): ``"bound"`` (default) bounds the step by the error the solver would
    make on the linearised equation, from a power-iteration estimate of the Jacobian's
    spectral radius (one field evaluation a step; derivatives in motion as accurate as the
    solve's own steps); ``True``/``"tangent"`` carries a probe tangent and tests its error
    too (a second state: the reverse gradient ~1.4× dearer, derivatives in motion ~2×
    more accurate at the same tolerance, and far fewer steps where a fast mode decays,
    i.e. with damping; ``docs/derivatives.md``); ``False``: the state's error test only. Other values raise
    ``ValueError``. ``dtmax``: optional maximum step. ``max_steps``: static bound on
    the steps (accepted + rejected) that sizes the recording buffers; a solve that needs
    more raises at run time naming it, one whose steps are rejected 100 times in a row (a
    field that turned non-finite) raises saying so (``throw=False``: ``inf`` states
    instead, in both cases, with NaN derivatives; ``"backsolve"`` always raises), in the
    value and in every derivative, also under ``jax.jit`` (where a check on the value
    alone would be dead code). ``ModelError`` for a bad model, control, ``rtol``/``atol`` or
    ``max_steps``, an ``x0`` of the wrong length (also under ``jax.jit``/``grad``/``vmap``:
    the shape is static), or ``ts`` that is not a 1-d, finite, strictly increasing
    sequence of at least two times (values checked when concrete; traced times out of
    order make the solve raise as for a passed-over save time).
    """
    adj = resolve_adjoint(adjoint, checkpoints)
    x0, ts = float64_arg(x0), float64_arg(ts)  # one array each, also from a tuple holding a traced time
    _check_inputs(model, control, x0, ts, rtol, atol, max_steps)
    if isinstance(adj, dfx.BacksolveAdjoint):
        # derivatives with respect to the times through the ODE's identities, as for the
        # discrete adjoint (diffrax's BacksolveAdjoint refuses tangents of t0/t1)
        vf, params = discrete_adjoint.model_field(model, control)
        return with_time_derivatives(vf, params, jnp.asarray(x0, dtype=jnp.float64), jnp.asarray(ts, dtype=jnp.float64),
                                     lambda x0, ts: _backsolve(model, control, x0, ts, solver, rtol, atol, max_steps, adj))
    f64 = float64_arg  # arrays: traced, not hashed, by filter_jit
    return _discrete_trajectory(model, control, f64(x0), f64(ts), solver, f64(rtol), f64(atol), int(max_steps),
                                None if dtmax is None else f64(dtmax), discrete_adjoint.tangent_mode(tangent_control), bool(throw), bool(dense))


def _backsolve(model, control, x0, ts, solver, rtol, atol, max_steps, adj):
    """:func:`trajectory` by diffrax's ``BacksolveAdjoint``, the times as constants."""
    # BacksolveAdjoint differentiates only through `args`, not closed-over values.
    term = dfx.ODETerm(lambda t, x, args: args[0].vector_field(t, x, args[1]))
    try:
        sol = dfx.diffeqsolve(
            term, default_solver() if solver is None else solver, ts[0], ts[-1], None,
            x0, args=(model, control), saveat=dfx.SaveAt(ts=ts),
            stepsize_controller=stepsize_controller(control, jnp.asarray(rtol), jnp.asarray(atol)),
            max_steps=max_steps, adjoint=adj, throw=False,
        )
    except TypeError as e:  # JAX's words: "can't apply forward-mode autodiff (jvp) to a custom_vjp function"
        if "forward-mode" not in str(e):
            raise
        raise TypeError("adjoint='backsolve' has reverse mode only (jax.grad, jax.vjp, jax.jacrev); for forward "
                        "mode and second derivatives (jax.jvp, jax.jacfwd, jax.hessian) use adjoint='discrete' "
                        "(the default)") from e
    return raise_if_failed(sol).ys


@eqx.filter_jit
def _discrete_trajectory(model, control, x0, ts, solver, rtol, atol, max_steps, dtmax, tangent_control, throw, dense):
    """:func:`trajectory`'s discrete-adjoint solve as one jit-compiled function of stable
    identity. Called inside an outer trace (a design step, a Jacobian), its jaxpr and its
    JVP/batched jaxprs are cached by JAX, so a second trace of the same solve (optimistix
    traces the residuals' linearisation in ``init`` and again in ``step``) is almost free:
    measured on experiment (a)'s Levenberg–Marquardt step, tracing 1.63 → 0.09 s."""
    vf, params = discrete_adjoint.model_field(model, control)
    return discrete_adjoint.solve(
        vf, params, x0, ts, control.kink_times, solver=solver, rtol=rtol, atol=atol, max_steps=max_steps,
        dtmax=dtmax, tangent_control=tangent_control, throw=throw, dense=dense,
    )


def _check_inputs(model, control, x0, ts, rtol, atol, max_steps, times: str = "ts", pair: bool = False) -> None:
    """Argument checks of the differentiable entry points. Shapes are checked always (they
    are static, also under ``jax.jit``/``grad``/``vmap``: a wrong state length would
    otherwise surface as a JAX type error from inside the solve); values only when
    concrete (under a transformation the traced values were checked when built).
    ``times``, ``pair``: as :func:`_check_times`."""
    from . import _checks as checks
    from .models import AbstractModel

    checks.require_x64("trajectory")
    if not isinstance(model, AbstractModel):
        raise ModelError(f"'model' must be a rollball_jax model (Ball, Disk, ...); got {type(model).__name__}")
    checks.control(control)
    checks.tolerance(rtol, "rtol")
    checks.tolerance(atol, "atol")
    checks.max_steps(max_steps)
    if np.ndim(x0) != 1 or np.shape(x0)[0] != model.state_size:  # as checks.state's message
        got = np.shape(x0)[0] if np.ndim(x0) == 1 else f"shape {np.shape(x0)}"
        raise ModelError(f"'x0' must have length {model.state_size} ({', '.join(model.state_labels())}); got {got}")
    _check_times(ts, times, pair)
    x = concrete(x0)
    if x is not None:
        checks.state(model, x)


def _check_times(ts, name: str, pair: bool = False) -> None:
    """Save times ``ts``: one axis of at least two, exactly two with ``pair`` (always);
    finite and strictly increasing (when concrete). ``ModelError`` naming ``name`` (the
    argument's name in the caller's signature: ``"ts"``, ``"t_span"``) otherwise."""
    if pair and np.shape(ts) != (2,):
        raise ModelError(f"'{name}' must be (t0, t1); got shape {np.shape(ts)}")
    if np.ndim(ts) != 1 or np.shape(ts)[0] < 2:
        raise ModelError(f"'{name}' must be a 1-d sequence of at least two times (t0 first); got shape {np.shape(ts)}")
    t = concrete(ts)
    if t is not None:
        t = np.asarray(t, dtype=np.float64)
        if not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
            raise ModelError(f"'{name}' must be finite and strictly increasing (t0 < ... < t1); got {t.tolist()}")


def final_state(model, control, x0, t_span: TimeSpan, **solve_kw) -> Float[Array, " N"]:
    """State at ``t_span[1]`` ``(N,)``; keywords and errors as :func:`trajectory` (``t_span``
    must be ``(t0, t1)`` with ``t0 < t1``)."""
    t_span = float64_arg(t_span)
    _check_times(t_span, "t_span", pair=True)
    return trajectory(model, control, x0, t_span, **solve_kw)[-1]


def gc_position(model, x: Float[Array, " N"], x0: Float[Array, " N"], z_a: RealScalar) -> Float[Array, "3"]:
    """Geometric centre (spatial frame, (3,)) of state ``x``; ``x0``/``z_a`` fix the disk's offset (5.41)."""
    context = model.observable_context(x0, z_a=z_a)
    return model.observables(x, **context)["gc"]


# Compiled: evaluated op by op, the observables cost ~10 ms a call (measured on the paper ball).
_gc_position = eqx.filter_jit(gc_position)


def final_gc(model, control, x0, t_span, *, z_a: float = 0.0, **solve_kw) -> Float[Array, "3"]:
    """GC position at ``t_span[1]``, spatial frame ``(3,)`` (third component 0)."""
    x0 = float64_arg(x0)
    return _gc_position(model, final_state(model, control, x0, t_span, **solve_kw), x0, float64_arg(z_a))


def distance_to_target(model, control, x0, t_span, target: FloatInput["2"], *, z_a: float = 0.0, **solve_kw) -> Float[Array, ""]:
    """Horizontal distance |z_GC(t1) − target| between the final GC and ``target`` (2,).

    Written as sqrt(d² + tiny) so its gradient stays finite at d = 0 (zero there); |d| has
    no second derivative at d = 0, and the Hessian there is ~1/sqrt(tiny) (~1e150): for
    second-order methods near the target use the squared distance. Raises ``ModelError``
    for a ``target`` that is not of shape (2,), and as :func:`trajectory` otherwise.
    """
    target = float64_arg(target)
    if np.shape(target) != (2,):
        raise ModelError(f"'target' must be a horizontal position (x, y), shape (2,); got shape {np.shape(target)}")
    gc = final_gc(model, control, x0, t_span, z_a=z_a, **solve_kw)
    d = gc[:2] - target
    return jnp.sqrt(jnp.sum(d * d) + 1e-300)


def running_cost(
    model,
    control,
    x0,
    t_span,
    integrand: Callable[[Array, Array], Array],
    *,
    solver: dfx.AbstractSolver | None = None,
    rtol: RealScalar = DEFAULT_RTOL,
    atol: RealScalar = DEFAULT_ATOL,
    max_steps: int = DERIVATIVE_MAX_STEPS,
    adjoint: str | dfx.AbstractAdjoint = "discrete",
    checkpoints: int | None = None,
    tangent_control: bool | str = discrete_adjoint.DEFAULT_TANGENT_CONTROL,
    throw: bool = True,
) -> Float[Array, ""]:
    """∫_{t0}^{t1} L(t, x(t)) dt, a scalar ``()``, with ``integrand(t, x) -> L`` (scalar; ``x``
    the state ``(N,)`` in the model's own coordinates) from ``x0`` ``(N,)`` over
    ``t_span = (t0, t1)``.

    The integral is appended to the state as one more ODE component (ċ = L), so it is
    computed to the solve tolerance and differentiated like the trajectory (discrete
    adjoint only). ``integrand`` must not close over values being differentiated.
    ``tangent_control``: as :func:`trajectory` (``"bound"``, the default,
    ``True``/``"tangent"``, ``False``).
    Raises ``ValueError`` for an adjoint other than ``"discrete"``/``"forward"``;
    ``ModelError`` for a bad model, control, ``x0``, ``rtol``/``atol`` or ``max_steps`` (as
    :func:`trajectory`); a solve that needs more than ``max_steps`` steps, or whose steps
    are rejected 100 times in a row, raises saying which (``throw=False``: returns
    ``inf``, with NaN derivatives), as :func:`trajectory` does.
    """
    adj = resolve_adjoint(adjoint, checkpoints)
    if not isinstance(adj, str):
        raise ValueError("running_cost supports adjoint='discrete' only")
    x0, t_span = float64_arg(x0), float64_arg(t_span)
    _check_inputs(model, control, x0, t_span, rtol, atol, max_steps, times="t_span", pair=True)
    return _running_cost_solve(
        model, control, float64_arg(x0), float64_arg(t_span), integrand, solver, float64_arg(rtol),
        float64_arg(atol), int(max_steps), discrete_adjoint.tangent_mode(tangent_control), bool(throw),
    )


@eqx.filter_jit
def _running_cost_solve(model, control, x0, t_span, integrand, solver, rtol, atol, max_steps, tangent_control, throw):
    """:func:`running_cost`'s solve as one jit-compiled function of stable identity (as
    :func:`_discrete_trajectory`): called outside a trace it compiles once per structure
    and ``integrand`` (pass the same function object to reuse it), not on every call."""
    vf, params = discrete_adjoint.model_field(model, control)

    def field(p, t, y):
        x = y[:-1]
        return jnp.concatenate([vf(p, t, x), jnp.atleast_1d(integrand(t, x))])

    def field_vjp(p, t, y, ct):  # the reverse sweep's VJP: the model's own, plus the integrand's
        x = y[:-1]
        x_bar, p_bar = vf.vjp(p, t, x, ct[:-1])
        _, pull = jax.vjp(lambda xx: jnp.atleast_1d(integrand(t, xx)), x)
        return jnp.concatenate([x_bar + pull(ct[-1:])[0], jnp.zeros((1,), y.dtype)]), p_bar

    field.vjp = field_vjp
    ys = discrete_adjoint.solve(
        field, params, jnp.concatenate([x0, jnp.zeros(1)]), t_span, control.kink_times, solver=solver, rtol=rtol,
        atol=atol, max_steps=max_steps, tangent_control=tangent_control, throw=throw,
    )
    return ys[-1, -1]


def state_transition_matrix(model, control, x0, ts, **solve_kw) -> Float[Array, "T N N"]:
    """∂x(t)/∂x(0) at the save times ``ts`` (``t0 = ts[0]``), shape ``(T, N, N)``, by forward mode.

    Uses the discrete adjoint with derivative-aware step control (keywords as
    :func:`trajectory`), so it is right from an equilibrium too. For the ball, the
    versor block follows the unconstrained ODE (7.2) (perturbations of |q| included).
    """
    return jax.jacfwd(lambda y: trajectory(model, control, y, ts, **solve_kw))(jnp.asarray(x0, dtype=jnp.float64))
