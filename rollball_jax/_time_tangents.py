"""Derivatives of a solve with respect to its times: the start time ``t0`` and the save times.

The discrete adjoint (:mod:`rollball_jax._discrete_adjoint`) differentiates the recorded
step sequence with the times held fixed. First derivatives with respect to the times come
from two identities of the ODE ``ẋ = f(t, x)`` instead:

* a save time moves along the solution: ``∂x(t_k)/∂t_k = f(t_k, x(t_k))``;
* the start time moves the start along it: the solve from ``(t0 + δ, x0)`` equals the
  solve from ``(t0, E(δ))``, ``E`` the state at ``t0`` of the solution through ``x0`` at
  ``t0 + δ``, so ``∂E/∂t0 = −f(t0, E)`` and the solve differentiates through ``E``:
  ``∂x(t_k)/∂t0 = −Φ(t_k, t0) f(t0, x0)`` (``Φ = ∂x(t_k)/∂x0``).

Each is a ``jax.custom_jvp`` whose value is its input unchanged (no cost in a solve that is
not differentiated; with symbolic zeros none either in a derivative that does not ask for
the times) and whose rule evaluates ``f`` at the function's own output, so the
derivative of a time derivative with respect to ``x0`` or a parameter is right too
(``∂²x(t1)/∂x0∂t1 = ∂f/∂x·Φ``).

Not right, hence refused: a derivative *with respect to a time* of another derivative,
e.g. ``jax.hessian`` with respect to ``(x0, t1)``, or ``jax.jacfwd`` in ``t1`` of
``jax.grad`` in ``x0``. The inner derivative (``Φ`` from the fixed steps) does not depend
on the times, and in reverse mode no rule sees that dependence. Such a derivative raises
``NotImplementedError`` while tracing instead of coming out wrong: the inner tangent
passes through a factor :func:`_fixed` ``(t) = 1``, computed from the times alone (so an
outer derivative always reaches it, in forward and reverse mode), whose own derivative
raises. (A second derivative in one time alone would be right by the rules above, but the
times travel as one array, whose tangent is then not a symbolic zero, and the check cannot
tell it apart: it is refused as well.)

These are derivatives of the ODE's solution, to the solve's tolerance, not of the discrete
map (whose steps jump when a time moves a step stop).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

MIXED_MESSAGE = (
    "a derivative with respect to a start or save time of another derivative is not supported (the inner "
    "derivative is taken on fixed steps and does not see the times). Supported: first derivatives in the "
    "times, and derivatives of a time derivative with respect to x0 or the parameters (take the time "
    "derivative innermost, e.g. jax.jacfwd(jax.grad(f, argnums=<time>), argnums=<x0>))"
)


@jax.custom_jvp
def _fixed(t):
    """``1.0`` shaped like ``t``; differentiating it with respect to ``t`` raises (while
    tracing) ``NotImplementedError(MIXED_MESSAGE)``."""
    return jnp.ones_like(t)


def _fixed_jvp(primals, tangents):
    (t,), (dt,) = primals, tangents
    if type(dt) is not SymbolicZero:
        raise NotImplementedError(MIXED_MESSAGE)
    return _fixed(t), dt


def _uncoupled(t, tangent):
    """``tangent`` times :func:`_fixed` ``(t)`` (broadcast over trailing axes)."""
    if type(tangent) is SymbolicZero:
        return tangent
    one = _fixed(t)
    return tangent * one.reshape(one.shape + (1,) * (tangent.ndim - one.ndim))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def started_at(vf, params, t0, x0):
    """``x0`` ``(N,)``, with ``∂/∂t0 = −vf(params, t0, ·)`` (module docstring): the initial
    state handed to a solve that starts at ``stop_gradient(t0)``."""
    del params
    return jnp.where(t0 == t0, x0, x0)  # x0 bit for bit, batched under vmap like t0 (as the rule's tangent)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def saved_at(vf, params, ts, ys):
    """``ys`` ``(T, N)`` (the states at the save times ``ts`` ``(T,)`` of a solve that saw
    ``stop_gradient(ts)``), with ``∂ys[k]/∂ts[k] = vf(params, ts[k], ys[k])``."""
    del params
    return jnp.where((ts == ts)[:, None], ys, ys)  # batched like ts: else jax.grad of a vmap over ts fails


def _moving(fn, rate):
    """The JVP rule of ``fn(vf, params, t, y) = y``: ``dy`` (through :func:`_uncoupled`)
    plus ``rate(vf, params, t, out, dt)``, with ``f`` evaluated at the output ``out`` of
    ``fn`` itself (so that an outer derivative sees the motion too)."""

    def jvp(vf, primals, tangents):
        params, t, y = primals
        _, dt, dy = tangents
        out = fn(vf, params, t, y)
        dy = _uncoupled(t, dy)
        if type(dt) is SymbolicZero:
            return out, dy
        move = rate(vf, params, t, out, dt)
        return out, move if type(dy) is SymbolicZero else dy + move

    return jvp


_fixed.defjvp(_fixed_jvp, symbolic_zeros=True)
started_at.defjvp(_moving(started_at, lambda vf, p, t0, x, dt0: -vf(p, t0, x) * dt0), symbolic_zeros=True)
saved_at.defjvp(_moving(saved_at, lambda vf, p, ts, ys, dts: jax.vmap(vf, in_axes=(None, 0, 0))(p, ts, ys) * dts[:, None]),
                symbolic_zeros=True)


def with_time_derivatives(vf, params, x0, save_ts, solve):
    """``solve(x0, save_ts)`` ``(T, N)`` with the time derivatives of the module docstring:
    ``solve`` is called with the times under ``stop_gradient`` and the start state as
    :func:`started_at`, and its output goes through :func:`saved_at` (at ``t0`` the two
    terms cancel exactly: the state there is ``x0`` whatever ``t0``)."""
    ys = solve(started_at(vf, params, save_ts[0], x0), jax.lax.stop_gradient(save_ts))
    return saved_at(vf, params, save_ts, ys)
