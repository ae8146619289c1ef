"""Keeping the ball's versor on the unit sphere: projection after every solver step.

The ODE (7.2) keeps |q| = 1 exactly (q̇ = ½ q Ω♯ is tangent to S³, since
d|q|²/dt = ⟨q, q Ω♯⟩ = 0), but a numerical solution does not: every step adds a local
error with a component normal to the sphere, and the drift |q| − 1 accumulates over time.
(7.2) uses q as given, so a drifted q gives a Λ of (2.15) that is not orthogonal:
Λ(q) = |q|² R(q/|q|) + (1 − |q|²) 1, which enters the gravity/force directions
Γ = Λᵀe3, Γ̃ = ΛᵀF_e and the rolling velocity ż.

When it matters
    At the paper's tolerances (1e-10 … 1e-12) over t ≤ 20, |q| − 1 stays ~1e-10 or below and
    projection changes the solution by less than the tolerance (paper ball: 1.3e-9 from the
    reference with or without it). It matters for long runs at loose tolerances, and more
    for low-order solvers. Paper ball over t ∈ [0, 200], max |q| − 1 at the step ends:

    ==========  ========  ========  ========
    rtol=atol   Dopri8    Tsit5     Dopri5
    ==========  ========  ========  ========
    1e-4        3.9e-5    2.2e-3    4.5e-3
    1e-6        3.5e-8    3.6e-6    6.2e-6
    1e-8        1.0e-9    4.3e-8    1.0e-7
    ==========  ========  ========  ========

    and the dense output saved between steps adds its own error (Dopri8 at 1e-6: |q| − 1
    up to 1.3e-6 at the saved points). With :class:`VersorProjection` |q| − 1 ≤ 2.2e-16 at
    every step end and saved point (``tests/test_dae.py``). Beyond |q| itself, a drift
    δ = |q| − 1 perturbs Λ, hence Γ, Γ̃ and ż, by O(2δ).

Two remedies are offered: :class:`VersorProjection`, a diffrax solver wrapper that
renormalises q after every step (a projection method, Hairer–Lubich–Wanner, *Geometric
Numerical Integration*, sec. IV.4), and the index-1 DAE (7.3) with |q|² − 1 = 0 as an
algebraic equation (:mod:`rollball_jax.dae`).
"""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._typing import FloatInput

from .errors import ModelError
from .models import AbstractModel, Ball

__all__ = ["VersorProjection", "project_versor", "versor_slice", "versor_norm_error"]


def versor_slice(model: AbstractModel) -> slice:
    """Position of q = [q0, q1, q2, q3] in the ball's state (7.1): ``slice(2n, 2n + 4)``.

    Raises ``ModelError`` for a model without a versor (e.g. the disk, whose orientation
    is the angle φ, 6.1).
    """
    if not isinstance(model, Ball):
        raise ModelError(f"only the ball's state (7.1) holds a versor; got a {type(model).__name__}")
    return slice(2 * model.n, 2 * model.n + 4)


def _normalise(x, start: int):
    q = x[..., start : start + 4]
    q = q / jnp.sqrt(jnp.sum(q * q, axis=-1, keepdims=True))
    return jnp.concatenate([x[..., :start], q, x[..., start + 4 :]], axis=-1)


def project_versor(model: Ball, x: FloatInput["... N"]) -> Float[Array, "... N"]:
    """``x`` with its versor replaced by q/|q| (the nearest point of S³); works on ``(..., N)``.

    The other components are returned unchanged. Differentiable (except at q = 0).
    Raises ``ModelError`` for a non-ball model or a state of the wrong length.
    """
    sl = versor_slice(model)
    x = jnp.asarray(x, dtype=jnp.float64)
    if x.shape[-1] != model.state_size:
        raise ModelError(f"x must have length {model.state_size} in its last axis; got {x.shape[-1]}")
    return _normalise(x, sl.start)


def versor_norm_error(model: Ball, xs: FloatInput["... N"]) -> Float[Array, "..."]:
    """|q| − 1 of every state in ``xs`` ``(..., N)`` (the drift that projection removes)."""
    sl = versor_slice(model)
    xs = jnp.asarray(xs)
    return jnp.linalg.norm(xs[..., sl], axis=-1) - 1.0


class _ProjectedInterpolation(dfx.AbstractLocalInterpolation):
    """The inner solver's dense output with the versor normalised: y(t) -> P(y(t))."""

    inner: dfx.AbstractLocalInterpolation
    start: int = eqx.field(static=True)

    @property
    def t0(self):
        return self.inner.t0

    @property
    def t1(self):
        return self.inner.t1

    def evaluate(self, t0, t1=None, left: bool = True):
        if t1 is None:
            return _normalise(self.inner.evaluate(t0, left=left), self.start)
        return self.evaluate(t1, left=left) - self.evaluate(t0, left=left)


class VersorProjection(dfx.AbstractWrappedSolver):
    """A diffrax solver that normalises the ball's versor after every step of ``solver``.

    ``VersorProjection(dfx.Dopri8(), model)`` behaves like ``dfx.Dopri8()`` — same order,
    error estimate, step-size control, dense output, and ``isinstance`` answers (it is an
    ``AbstractWrappedSolver``, so e.g. wrapping ``dfx.Kvaerno5()`` still counts as
    implicit) — except that the step's end value y1 has q replaced by q/|q|, with q the
    slice ``x[2n : 2n + 4]`` of the state (7.1). Use it wherever a solver is accepted:
    ``rb.simulate(model, control, x0, solver=VersorProjection(dfx.Dopri8(), model))`` or
    ``rb.integrate(..., solver=...)``; it is differentiable (forward mode, ``jax.jacfwd``
    through ``rb.integrate``, differentiates the projection too).

    Details: the error estimate is the inner solver's, for the unprojected step (the
    projection moves y1 by O(local error), below the tolerance). Dense output (values
    saved at ``ts``, ``SaveAt(dense=True)``) is the inner solver's interpolant with q
    normalised too, so every returned state has |q| = 1 to rounding; solvers whose
    interpolant uses y1 (``dense_info["y1"]``, e.g. Kvaerno5's Hermite interpolation) are
    given the projected y1. FSAL solvers (Dopri5, Tsit5) reuse f evaluated at the
    unprojected y1 for the next step's first stage: an O(local error) inconsistency,
    harmless at any tolerance where the step is accepted.

    Parameters
    ----------
    solver : the diffrax solver to wrap (e.g. ``dfx.Dopri8()``).
    model_or_start : a :class:`~rollball_jax.Ball` (the versor starts at index 2n) or the
        integer index of q0 in the state.
    """

    solver: dfx.AbstractSolver
    start: int = eqx.field(static=True)

    def __init__(self, solver: dfx.AbstractSolver, model_or_start: Ball | int):
        if not isinstance(solver, dfx.AbstractSolver):
            raise ModelError(f"solver must be a diffrax solver; got {type(solver).__name__}")
        self.solver = solver
        if isinstance(model_or_start, AbstractModel):
            self.start = versor_slice(model_or_start).start
        else:
            self.start = int(model_or_start)
            if self.start < 0:
                raise ModelError(f"versor start index must be >= 0; got {self.start}")

    # ---- forwarded attributes ---------------------------------------------------------
    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        inner_cls, start = self.solver.interpolation_cls, self.start

        def make(**kwargs):
            return _ProjectedInterpolation(inner_cls(**kwargs), start)

        return make

    @property
    def term_compatible_contr_kwargs(self):
        return self.solver.term_compatible_contr_kwargs

    @property
    def root_finder(self):
        """The wrapped implicit solver's root finder (diffrax fills in its tolerances)."""
        return self.solver.root_finder

    @property
    def root_find_max_steps(self):
        return self.solver.root_find_max_steps

    @property
    def scan_kind(self):
        """The wrapped Runge–Kutta solver's ``scan_kind`` (diffrax's adjoints set it for forward mode)."""
        return self.solver.scan_kind

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)

    # ---- the projection -----------------------------------------------------------------
    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, y_error, dense_info, solver_state, result = self.solver.step(
            terms, t0, t1, y0, args, solver_state, made_jump
        )
        if y1.shape[-1] < self.start + 4:
            raise ModelError(f"state of length {y1.shape[-1]} has no versor at [{self.start}, {self.start + 4})")
        y1 = _normalise(y1, self.start)
        if isinstance(dense_info, dict) and "y1" in dense_info:
            dense_info = {**dense_info, "y1": y1}
        return y1, y_error, dense_info, solver_state, result
