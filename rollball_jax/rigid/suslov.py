"""Suslov's problem: a rigid body with ⟨Ω, ξ(t)⟩ = 0 (Putkaradze & Rogers, Appendix A.2, eqs. A.34–A.38).

A rigid body turning about a fixed point whose body angular velocity must stay orthogonal
to a prescribed body-frame vector ξ(t) (Suslov 1902; ξ may vary in time as in the paper's
ref. [48]). Lagrange–d'Alembert with Euler–Poincaré gives (A.36)

    𝕀Ω̇ = (𝕀Ω) × Ω + λξ,

with the multiplier (A.37) λ = −[⟨Ω, ξ̇⟩ + ⟨(𝕀Ω) × Ω, 𝕀⁻¹ξ⟩] / ⟨ξ, 𝕀⁻¹ξ⟩, i.e. (A.38).
State (7,): x = [q0, q1, q2, q3, Ω1, Ω2, Ω3], q̇ = ½ q Ω♯ (2.21).

(A.38) makes d⟨Ω, ξ⟩/dt = 0, so the constraint holds for all time if it holds at t0
(:meth:`Suslov.initial_state` checks or enforces it); the energy ½⟨𝕀Ω, Ω⟩ is then
conserved as well, for constant and time-varying ξ alike, because the reaction λξ is
orthogonal to Ω.
"""

from __future__ import annotations

import abc

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Inexact, PyTree

from .._typing import ArrayInput, FloatInput

from ..errors import ModelError, concrete
from . import _common
from .free_body import AbstractVersorBody, euler_rhs

__all__ = ["Suslov", "AbstractConstraintVector", "ConstantVector", "FunctionVector"]


class AbstractConstraintVector(eqx.Module):
    """ξ(t): ``__call__(t) -> (3,)``, a body-frame vector (need not be unit length)."""

    @abc.abstractmethod
    def __call__(self, t: FloatInput[""]) -> Inexact[Array, "3"]:
        """The constraint vector ``(3,)`` (body frame) at time ``t``."""


class ConstantVector(AbstractConstraintVector):
    """ξ(t) = ``value`` ``(3,)`` (Suslov's original problem)."""

    value: Inexact[Array, "3"]

    def __init__(self, value: ArrayInput):
        self.value = _common.vector(value, "xi")

    def __call__(self, t):
        return self.value + 0.0 * t


class FunctionVector(AbstractConstraintVector):
    """User ξ(t) = ``fn(t, params)`` ``(3,)``, written with ``jax.numpy`` (ξ̇ by ``jax.jvp``)."""

    params: PyTree
    fn: Callable[[Array, Any], Array] = eqx.field(static=True)

    def __init__(self, fn: Callable[[Array, Any], Array], params: PyTree = None):
        if not callable(fn):
            raise ModelError("FunctionVector 'fn' must be callable: fn(t, params) -> (3,)")
        self.fn = fn
        self.params = params

    def __call__(self, t):
        return jnp.asarray(self.fn(t, self.params))


def _as_vector(xi) -> AbstractConstraintVector:
    if isinstance(xi, AbstractConstraintVector):
        return xi
    if callable(xi):
        raise ModelError("pass a time-dependent ξ as FunctionVector(fn, params), fn(t, params) -> (3,)")
    return ConstantVector(xi)


class Suslov(AbstractVersorBody):
    """Suslov's nonholonomic rigid body (Putkaradze & Rogers, eq. A.38).

    Attributes
    ----------
    inertia : (3,)                 principal moments (d1, d2, d3) about the fixed point.
    xi : AbstractConstraintVector  ξ(t), body frame; an array ``(3,)`` means constant ξ.

    Raises ``ModelError`` for invalid moments (non-positive, triangle inequality), a ξ of
    the wrong shape, or ξ(0) = 0 (checked when ξ(0) can be evaluated concretely).
    """

    inertia: Inexact[Array, "3"]
    xi: AbstractConstraintVector

    def __init__(self, inertia: ArrayInput, xi: AbstractConstraintVector | ArrayInput):
        self.inertia = _common.principal_moments(inertia)
        self.xi = _as_vector(xi)
        shape = jax.eval_shape(self.xi, jnp.zeros(())).shape
        if shape != (3,):
            raise ModelError(f"ξ(t) must return shape (3,); got {shape}")
        try:
            x0 = concrete(self.xi(jnp.zeros(())))
        except Exception:  # traced parameters
            x0 = None
        if x0 is not None and not np.linalg.norm(x0) > 0:
            raise ModelError("ξ(0) must be a non-zero vector")

    def initial_state(
        self, q: ArrayInput = _common.IDENTITY_VERSOR, Omega: ArrayInput = (0.0, 0.0, 0.0), t0: float = 0.0,
        project: bool = False,
    ) -> Inexact[Array, "7"]:
        """x = [q, Ω] with ⟨Ω, ξ(t0)⟩ = 0.

        ``project=True`` removes the ξ(t0) component of Ω (the component the constraint
        forbids); otherwise a violation larger than 1e-12·|Ω||ξ| raises ``ModelError``.
        """
        omega = _common.vector(Omega, "Omega")
        xi = self.xi(jnp.asarray(t0, dtype=jnp.float64))
        if project:
            omega = omega - jnp.dot(omega, xi) / jnp.dot(xi, xi) * xi
        else:
            o, x = concrete(omega), concrete(xi)
            if o is not None and x is not None and abs(o @ x) > 1e-12 * (np.linalg.norm(o) * np.linalg.norm(x) + 1e-300):
                raise ModelError(
                    f"initial Ω violates the constraint: ⟨Ω, ξ(t0)⟩ = {o @ x:.3g}; pass project=True to remove it"
                )
        return jnp.concatenate([_common.versor(q), omega])

    def multiplier(self, t, x) -> Inexact[Array, ""]:
        """λ(t, x) of (A.37): −[⟨Ω, ξ̇⟩ + ⟨(𝕀Ω) × Ω, 𝕀⁻¹ξ⟩] / ⟨ξ, 𝕀⁻¹ξ⟩; ξ̇ by ``jax.jvp``."""
        omega = x[4:7]
        t = jnp.asarray(t, dtype=x.dtype)
        xi, xi_dot = jax.jvp(self.xi, (t,), (jnp.ones_like(t),))
        inv_xi = xi / self.inertia  # 𝕀⁻¹ξ
        return -(jnp.dot(omega, xi_dot) + jnp.dot(euler_rhs(self.inertia, omega), inv_xi)) / jnp.dot(xi, inv_xi)

    def vector_field(self, t, x, control=None):
        """ẋ = [½ q Ω♯ (2.21), 𝕀⁻¹((𝕀Ω) × Ω + λξ) (A.36) with λ of (A.37)] — i.e. (A.38)."""
        q, omega = x[:4], x[4:7]
        xi = self.xi(t)
        omega_dot = (euler_rhs(self.inertia, omega) + self.multiplier(t, x) * xi) / self.inertia  # (A.38)
        return jnp.concatenate([_common.q_dot_body(q, omega), omega_dot])

    def constraint(self, t, x) -> Inexact[Array, ""]:
        """⟨Ω, ξ(t)⟩ for one state (zero along exact solutions)."""
        return jnp.dot(x[4:7], self.xi(jnp.asarray(t, dtype=x.dtype)))

    def constraint_values(self, ts: FloatInput[" T"], xs: FloatInput["T 7"]) -> np.ndarray:
        """⟨Ω(t), ξ(t)⟩ along a trajectory ``(T,)`` (e.g. ``sol.ts, sol.xs``)."""
        return np.asarray(_constraint_values(self, jnp.asarray(ts, dtype=jnp.float64), jnp.asarray(xs, dtype=jnp.float64)))

    def observables(self, x, **context) -> dict[str, Array]:
        """Observables of one state (time-independent; see :meth:`constraint_values` for ⟨Ω, ξ⟩).

        Keys: ``orientation`` (3, 3), ``omega_body`` (3,), ``omega_spatial`` (3,),
        ``momentum_body`` (3,) 𝕀Ω, ``energy`` () ½⟨𝕀Ω, Ω⟩, ``versor_norm`` ().
        """
        return self._rotation_observables(x)


@eqx.filter_jit
def _constraint_values(model: Suslov, ts, xs):
    return jax.vmap(model.constraint)(ts, xs)
