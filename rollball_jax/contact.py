"""Contact force along a trajectory: total momentum balance (Putkaradze & Rogers, sec. 4, eq. 5.44).

The plane pushes on the ball (or disk) at the contact point with a force F_c. Newton's
second law for the whole system (the shell m0 with its static structure and the point
masses m_1…m_n), whose total mass M = Σ_{i=0}^n m_i has its centre of mass at z_cm,
reads M z̈_cm = F_c + F_e − M g e3 in the spatial frame, so

    F_c = Σ_{i=0}^n m_i z̈_i − F_e + M g e3 = M z̈_cm − F_e + M g e3.

Its vertical part N = ⟨F_c, e3⟩ is the normal force; rolling without lifting off needs
N > 0. Its horizontal part F_t = (F_c,1, F_c,2) is the friction the plane must supply;
rolling without slipping needs |F_t| ≤ μ N for a friction coefficient μ. For the disk
(sec. 5.4) F_c = (−f_s, 0, N) with f_s, N of (5.44).

The acceleration z̈_cm is computed exactly from the vector field, with no finite
differences, by two independent routes:

* :func:`cm_acceleration` (used everywhere): for the ball and the disk, the rigid-body
  kinematics z̈_i = z̈_GC + Λ(Ω̇ × ζ_i + Ω × (Ω × ζ_i) + 2Ω × ζ̇_i + ζ̈_i) with Ω̇ from the
  vector field — one vector-field evaluation, cheap to differentiate inside a design cost;
* :func:`cm_acceleration_jvp` (generic, any model with a ``cm_spatial`` observable):
  z_cm(x) is a function of the state only, so along the flow ż_cm = Dz_cm(x)·f(t, x) =:
  v(t, x) and z̈_cm = ∂_t v + D_x v·f, one forward-mode derivative (``jax.jvp``) of v
  along the tangent (1, f), time dependence of u(t) included.

The tests check the two against each other and against the disk's Newtonian (5.44).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Inexact

from ._typing import FloatInput

from ._dispatch import float64_arg
from .controls import AbstractControl
from .dynamics.ball import all_masses
from .observables import Kinematics

__all__ = [
    "ContactForces",
    "cm_acceleration",
    "cm_acceleration_jvp",
    "contact_force",
    "contact_forces",
    "contact_along",
    "total_mass",
]

_TINY = 1e-300


def total_mass(model) -> Inexact[Array, ""]:
    """M = m0 + Σ m_i."""
    return model.m0 + jnp.sum(model.masses)


def _cm_spatial(model, x, context):
    return model.observables(x, **context)["cm_spatial"]


def cm_acceleration_jvp(model, control: AbstractControl, t, x, context: dict | None = None) -> Inexact[Array, "3"]:
    """z̈_cm by nested ``jax.jvp`` along the flow (any model with a ``cm_spatial`` observable).

    The second derivative of ``cm_spatial(x(t))`` along ẋ = f(t, x): with
    v(t, x) = Dz_cm(x)·f(t, x), z̈_cm = ∂_t v + D_x v·f. Exact, generic, but it
    differentiates the vector field, which makes it costly to compile inside a
    differentiated design cost; :func:`cm_acceleration` uses closed forms for the ball
    and the disk and is checked against this route in the tests.
    """
    context = {} if context is None else context
    t = jnp.asarray(t, dtype=jnp.float64)
    x = jnp.asarray(x, dtype=jnp.float64)

    def velocity(tt, xx):
        f = model.vector_field(tt, xx, control)
        return jax.jvp(lambda y: _cm_spatial(model, y, context), (xx,), (f,))[1]

    f = model.vector_field(t, x, control)
    return jax.jvp(velocity, (t, x), (jnp.ones_like(t), f))[1]


def cm_acceleration(model, control: AbstractControl, t, x, context: dict | None = None) -> Inexact[Array, "3"]:
    """z̈_cm, the acceleration of the total system CM in the spatial frame ``(3,)``.

    Ball and disk: closed form from one evaluation of the vector field. Each mass sits at
    z_i = z_GC + Λ ζ_i (ζ_0 = χ0), and with Λ̇ = Λ Ω̂,

        z̈_i = z̈_GC + Λ (Ω̇ × ζ_i + Ω × (Ω × ζ_i) + 2 Ω × ζ̇_i + ζ̈_i),
        ζ̇_i = θ̇_i ζ′_i,  ζ̈_i = u_i ζ′_i + θ̇_i² ζ″_i,

    where Ω̇ is κ (7.4) for the ball and −φ̈ e2 for the disk (5.30), and the rolling
    constraint gives z̈_GC = r (ω̇ × e3) with ω̇ = d(ΛΩ)/dt = Λ Ω̇. Other models fall back to
    :func:`cm_acceleration_jvp`.
    """
    if not hasattr(model, "body_angular_acceleration"):
        return cm_acceleration_jvp(model, control, t, x, context)
    context = {} if context is None else context
    t = jnp.asarray(t, dtype=jnp.float64)
    x = jnp.asarray(x, dtype=jnp.float64)
    n = model.n
    f = model.vector_field(t, x, control)
    k = Kinematics(model, x, **context)
    lam, omega = k.orientation, k.omega
    omega_dot = model.body_angular_acceleration(x, f)
    u = control(t, x) if n else jnp.zeros((0,), dtype=x.dtype)
    m, zeta, dzeta, ddzeta, td, uu = all_masses(model, k.theta, k.theta_dot, u)
    zeta_dot = td[:, None] * dzeta
    zeta_ddot = uu[:, None] * dzeta + (td**2)[:, None] * ddzeta
    a_body = (
        jnp.cross(omega_dot, zeta)
        + jnp.cross(omega, jnp.cross(omega, zeta))
        + 2.0 * jnp.cross(omega, zeta_dot)
        + zeta_ddot
    )
    omega_s_dot = lam @ omega_dot
    gc_ddot = model.radius * jnp.stack([omega_s_dot[1], -omega_s_dot[0], 0.0 * omega_s_dot[0]])
    mass = jnp.sum(m)
    return gc_ddot + lam @ (jnp.sum(m[:, None] * a_body, axis=0) / mass)


def contact_force(model, control: AbstractControl, t, x, context: dict | None = None) -> Inexact[Array, "3"]:
    """F_c = M z̈_cm − F_e + M g e3: the plane's force on the ball at the contact point ``(3,)``, spatial frame."""
    mass = total_mass(model)
    gravity = jnp.array([0.0, 0.0, 1.0]) * model.g * mass
    return mass * cm_acceleration(model, control, t, x, context) - model.force(t) + gravity


class ContactForces(eqx.Module):
    """Contact force along a trajectory (time first).

    Attributes
    ----------
    ts : (T,)            times.
    force : (T, 3)       F_c, spatial frame.
    normal : (T,)        N = F_c,3 (must stay > 0: no lift-off).
    tangential : (T, 2)  F_t = (F_c,1, F_c,2), the friction the plane must supply.
    friction_ratio : (T,)  |F_t| / N, the smallest friction coefficient that prevents
                       slipping at each time (``inf``/negative where N ≤ 0).
    """

    ts: Inexact[Array, " T"]
    force: Inexact[Array, "T 3"]

    @property
    def normal(self) -> Inexact[Array, " T"]:
        return self.force[:, 2]

    @property
    def tangential(self) -> Inexact[Array, "T 2"]:
        return self.force[:, :2]

    @property
    def tangential_norm(self) -> Inexact[Array, " T"]:
        ft = self.tangential
        return jnp.sqrt(jnp.sum(ft * ft, axis=-1) + _TINY)

    @property
    def friction_ratio(self) -> Inexact[Array, " T"]:
        return self.tangential_norm / self.normal

    @property
    def min_normal(self) -> Inexact[Array, ""]:
        """min_t N."""
        return jnp.min(self.normal)

    @property
    def max_friction_ratio(self) -> Inexact[Array, ""]:
        """max_t |F_t|/N (meaningful when N > 0 throughout)."""
        return jnp.max(self.friction_ratio)

    def summary(self) -> dict[str, float]:
        """``min_normal``, ``max_friction_ratio``, ``max_tangential`` as Python floats."""
        return {
            "min_normal": float(self.min_normal),
            "max_friction_ratio": float(self.max_friction_ratio),
            "max_tangential": float(jnp.max(self.tangential_norm)),
        }


def contact_forces(
    model, control: AbstractControl, ts: FloatInput[" T"], xs: FloatInput["T N"], context: dict | None = None
) -> ContactForces:
    """Contact force at every state of a trajectory ``xs`` ``(T, N)`` at times ``ts`` ``(T,)``.

    Pure and differentiable (use it inside a design cost); vmapped over time, and compiled
    as one program per model/control structure (called outside a trace, op-by-op
    evaluation cost ~43 ms a call on the paper ball with T = 201, compiled ~0.4 ms).
    """
    return _contact_forces_jit(model, control, float64_arg(ts), float64_arg(xs), context)


@eqx.filter_jit
def _contact_forces_jit(model, control, ts, xs, context):
    force = jax.vmap(lambda t, x: contact_force(model, control, t, x, context))(ts, xs)
    return ContactForces(ts=ts, force=force)


def contact_along(model, control: AbstractControl, x0, t_span, *, ts=None, n_save: int = 401, **simulate_kw) -> ContactForces:
    """Simulate from ``x0`` at ``t_span[0]`` with :func:`rollball_jax.simulate` and return the
    contact forces along the trajectory.

    ``ts`` (within ``t_span``; default ``n_save`` points over it) are the times; other
    keywords go to ``simulate``.
    """
    from .solve import simulate

    sol = simulate(model, control, x0, t_span, ts=ts, n_save=n_save, **simulate_kw)
    return contact_forces(model, control, sol.ts, sol.xs, sol.context)
