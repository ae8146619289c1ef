"""Derivatives through whole trajectories: differentiable solves, functionals, adjoints.

Every function here is a pure function of ``(model, control, x0)`` (pytrees), so
``jax.grad``/``jax.jacrev``/``jax.jacfwd`` (or ``eqx.filter_grad`` for whole models)
give exact derivatives of the *discretised* solve with respect to every array
parameter: masses, rail radii/shapes/orientations/centres, moments of inertia, χ0, r,
g, the initial state and control parameters (spline knot values). To differentiate
with respect to a derived parametrisation (e.g. the spherical angles ``v`` of
:meth:`CircleRail.paper`), build the model inside the differentiated function.

Adjoints (``adjoint=``):

* ``"recursive"`` (default) — diffrax ``RecursiveCheckpointAdjoint``: reverse mode
  through the solver's own operations, with binomial checkpointing. Exact gradient of
  the computation performed, memory O(checkpoints). Best for a scalar functional of
  many parameters.
* ``"forward"`` — diffrax ``ForwardMode``: forward mode (``jax.jvp``/``jax.jacfwd``);
  best for few parameters or many outputs (e.g. :func:`state_transition_matrix`).
* ``"direct"`` — diffrax ``DirectAdjoint``: supports both modes, slower.
* ``"backsolve"`` — diffrax ``BacksolveAdjoint``: solves the continuous adjoint ODE
  backwards in time. Not the default: its gradient is that of the continuous problem
  with an independent error (it is *not* the derivative of what the forward solve
  computed, so it disagrees with finite differences of the forward solve at the level
  of the tolerance), it re-integrates the state backwards (error growth on unstable
  motions) and it costs an extra solve.

Why the kinks matter (see ``docs/derivatives.md``). Step sizes are treated as constants
by the derivative (diffrax stops gradients through the step-size controller), so the
derivative is that of the discretised map with the chosen steps frozen. Where u(t) has a
kink inside a step, the local error there is not controlled by the error estimate and
the discrete map's dependence on the step placement is large; rounding-level
differences between two evaluations (forward pass vs the recomputation in the reverse
pass, or the primal under ``jvp``) can move a step decision and change the derivative
by far more than the tolerance. All solves here therefore step exactly onto
``control.kink_times`` (jump times), as :func:`rollball_jax.solve.integrate` does.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .solve import DEFAULT_ATOL, DEFAULT_MAX_STEPS, DEFAULT_RTOL, default_solver, integrate, stepsize_controller

ADJOINTS = ("recursive", "forward", "direct", "backsolve")


def resolve_adjoint(adjoint: str | dfx.AbstractAdjoint = "recursive", checkpoints: int | None = None) -> dfx.AbstractAdjoint:
    """Map an adjoint name (see module docstring) to a diffrax adjoint object.

    ``checkpoints`` (recursive only): number of checkpoints; ``None`` lets diffrax
    choose ≈ √(2·max_steps). Raises ``ValueError`` for an unknown name.
    """
    if isinstance(adjoint, dfx.AbstractAdjoint):
        return adjoint
    if adjoint == "recursive":
        return dfx.RecursiveCheckpointAdjoint(checkpoints=checkpoints)
    if adjoint == "forward":
        return dfx.ForwardMode()
    if adjoint == "direct":
        return dfx.DirectAdjoint()
    if adjoint == "backsolve":
        return dfx.BacksolveAdjoint()
    raise ValueError(f"unknown adjoint {adjoint!r}; choose one of {ADJOINTS} or pass a diffrax adjoint")


def trajectory(
    model,
    control,
    x0: Float[ArrayLike, " N"],
    ts: Float[ArrayLike, " T"],
    *,
    solver: dfx.AbstractSolver | None = None,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    max_steps: int = DEFAULT_MAX_STEPS,
    adjoint: str | dfx.AbstractAdjoint = "recursive",
    checkpoints: int | None = None,
) -> Float[Array, "T N"]:
    """States at the save times ``ts`` ``(T,)`` (``t0 = ts[0]``), shape ``(T, N)``.

    Differentiable in all array leaves of ``model``, ``control`` and ``x0``. A failed
    solve raises at run time (``throw=True``) instead of returning ``inf``.
    """
    adj = resolve_adjoint(adjoint, checkpoints)
    if isinstance(adj, dfx.BacksolveAdjoint):
        ts = jnp.asarray(ts, dtype=jnp.float64)
        # BacksolveAdjoint differentiates only through `args`, not closed-over values.
        term = dfx.ODETerm(lambda t, x, args: args[0].vector_field(t, x, args[1]))
        sol = dfx.diffeqsolve(
            term, default_solver() if solver is None else solver, ts[0], ts[-1], None,
            jnp.asarray(x0, dtype=jnp.float64), args=(model, control), saveat=dfx.SaveAt(ts=ts),
            stepsize_controller=stepsize_controller(control, jnp.asarray(rtol), jnp.asarray(atol)),
            max_steps=max_steps, adjoint=adj,
        )
        return sol.ys
    sol = integrate(model, control, x0, ts, solver=solver, rtol=rtol, atol=atol, max_steps=max_steps, adjoint=adj, throw=True)
    return sol.ys[0]


def final_state(model, control, x0, t_span: tuple[float, float], **solve_kw) -> Float[Array, " N"]:
    """State at ``t_span[1]`` ``(N,)``; keywords as :func:`trajectory`."""
    return trajectory(model, control, x0, jnp.asarray(t_span, dtype=jnp.float64), **solve_kw)[-1]


def gc_position(model, x: Float[Array, " N"], x0: Float[Array, " N"], z_a: float = 0.0) -> Float[Array, "3"]:
    """Geometric centre (spatial frame, (3,)) of state ``x``; ``x0``/``z_a`` fix the disk's offset (5.41)."""
    context = model.observable_context(x0, z_a=z_a)
    return model.observables(x, **context)["gc"]


def final_gc(model, control, x0, t_span, *, z_a: float = 0.0, **solve_kw) -> Float[Array, "3"]:
    """GC position at ``t_span[1]``, spatial frame ``(3,)`` (third component 0)."""
    x0 = jnp.asarray(x0, dtype=jnp.float64)
    return gc_position(model, final_state(model, control, x0, t_span, **solve_kw), x0, z_a)


def distance_to_target(model, control, x0, t_span, target: Float[ArrayLike, "2"], *, z_a: float = 0.0, **solve_kw) -> Float[Array, ""]:
    """Horizontal distance |z_GC(t1) − target| between the final GC and ``target`` (2,).

    Written as sqrt(d² + tiny) so its gradient stays finite at d = 0.
    """
    gc = final_gc(model, control, x0, t_span, z_a=z_a, **solve_kw)
    d = gc[:2] - jnp.asarray(target, dtype=jnp.float64)
    return jnp.sqrt(jnp.sum(d * d) + 1e-300)


def running_cost(
    model,
    control,
    x0,
    t_span,
    integrand: Callable[[Array, Array], Array],
    *,
    solver: dfx.AbstractSolver | None = None,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    max_steps: int = DEFAULT_MAX_STEPS,
    adjoint: str | dfx.AbstractAdjoint = "recursive",
    checkpoints: int | None = None,
) -> Float[Array, ""]:
    """∫_{t0}^{t1} L(t, x(t)) dt with ``integrand(t, x) -> L`` (scalar).

    The integral is appended to the state as one more ODE component (ċ = L), so it is
    computed to the solve tolerance and differentiated like the trajectory.
    """
    x0 = jnp.asarray(x0, dtype=jnp.float64)
    t0, t1 = (jnp.asarray(t, dtype=jnp.float64) for t in t_span)

    def field(t, y, args):
        x = y[:-1]
        return jnp.concatenate([model.vector_field(t, x, control), jnp.atleast_1d(integrand(t, x))])

    sol = dfx.diffeqsolve(
        dfx.ODETerm(field), default_solver() if solver is None else solver, t0, t1, None,
        jnp.concatenate([x0, jnp.zeros(1)]), saveat=dfx.SaveAt(t1=True),
        stepsize_controller=stepsize_controller(control, jnp.asarray(rtol), jnp.asarray(atol)),
        max_steps=max_steps, adjoint=resolve_adjoint(adjoint, checkpoints),
    )
    return sol.ys[-1, -1]


def state_transition_matrix(model, control, x0, ts, **solve_kw) -> Float[Array, "T N N"]:
    """∂x(t)/∂x(0) at the save times ``ts`` (``t0 = ts[0]``), shape ``(T, N, N)``, by forward mode.

    For the ball, the versor block follows the unconstrained ODE (7.2) (perturbations of
    |q| included).
    """
    solve_kw.setdefault("adjoint", "forward")
    return jax.jacfwd(lambda y: trajectory(model, control, y, ts, **solve_kw))(jnp.asarray(x0, dtype=jnp.float64)).transpose(0, 1, 2)
