"""The free rigid body on SE(3) in three choices of velocity coordinates (the SE(3) paper).

The SE(3) paper (Massa & Vignolo, "Newton–Euler, Lagrange and Kirchhoff formulations of rigid
body dynamics: a unified approach") derives all three from Gauss' principle, eqs.
(12)–(15), the difference being only the quasi-velocities z^α chosen on T SE(3).

Configuration (the SE(3) paper, eq. 1): x̂ = R x + b, with R (3, 3) body → observer (spatial)
frame, kept here as a versor q (Putkaradze & Rogers, 2.15), and b (3,) the spatial position of the
body-fixed origin O. Velocities (the identifications after eq. 3, and eqs. 8, 10, 10a, 11):

==============  ===========================  =============================  ==========
formulation     velocity coordinates          frame                          invariance
==============  ===========================  =============================  ==========
Kirchhoff       u = Rᵀḃ, Ω = (RᵀṘ)^∨          body (v_O and ω in {e_i})      left
Newton–Euler    ξ = ḃ − ω × b, ω = (ṘRᵀ)^∨     observer (spatial, {k_i})      right
Lagrange        ḃ (spatial), Ω (body)          mixed                          —
==============  ===========================  =============================  ==========

(ξ is the velocity of the body point at the spatial origin, the SE(3) paper, eq. (10a); the
body-point velocities are v_P = v_O + ω × (P − O) (8) = ξ + ω × (P − Ω) (11).)

Inertia: one symmetric positive-definite 6×6 𝕄 in body components about O, ordering
(linear, angular), kinetic energy T = ½ Vᵀ𝕄V with V = (u, Ω). For a plain rigid body
𝕄 = [[m 1, −m ĉ], [m ĉ, 𝕀_O]] (:func:`rigid_body_inertia`); a body in an ideal fluid adds
the added-mass matrix (:func:`rollball_jax.rigid.added_mass.ellipsoid_added_mass`), the
fluid's momenta entering exactly as the body's (Kirchhoff's form). Body momenta
(the SE(3) paper, eq. 17): (Q, Γ_O) = 𝕄 (u, Ω); spatial momenta Q_s = RQ and Γ_Ω = RΓ_O + b × Q_s
(angular momentum about the fixed origin, eq. 19).

External force R and torque M_O come from :mod:`rollball_jax.rigid.wrench` (spatial
components, torque about O). Equations, with ω = RΩ and all products as in the paper:

* Kirchhoff (the SE(3) paper, eqs. 16–17 in 15; body components):
  Q̇ + Ω × Q = R_b,  Γ̇_O + Ω × Γ_O + u × Q = M_O,b;  Ṙ = RΩ̂, ḃ = Ru.
* Newton–Euler (eqs. 18–19 in 15; spatial components): Q̇_s = R_s, Γ̇_Ω = M_Ω = M_O,s +
  b × R_s, with (Q_s, Γ_Ω) = 𝕄_s(g)(ξ, ω), 𝕄_s = Ad_g⁻ᵀ 𝕄 Ad_g⁻¹;  Ṙ = ω̂R, ḃ = ξ + ω × b.
* Lagrange (the last display of the SE(3) paper, after eq. 19; z = (ḃ, Ω)): Q̇_s = R_s (spatial),
  Γ̇_O + Ω × Γ_O + (Rᵀḃ) × Q = M_O,b (body), "with the angular momentum and the torque
  referred to the body-fixed point O";  Ṙ = RΩ̂.

All three describe the same curve (R(t), b(t)) in SE(3). In the language of Putkaradze & Rogers, 
Appendix A: Kirchhoff's form is the Euler–Poincaré equation (A.25) of the left-invariant
kinetic energy on SE(3) (with ad* of se(3)), and Newton–Euler's is its conservation-law
form, d/dt Ad*_(g⁻¹)(δℓ/δξ) = 0 (A.26; on SO(3), A.12): the spatial momenta (Q_s, Γ_Ω)
are conserved, or balanced by the external wrench.
"""

from __future__ import annotations

import abc

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Inexact

from .._typing import ArrayInput

from ..errors import ModelError, concrete
from ..geometry import hat, rotation_matrix
from ..models import AbstractModel
from . import _common
from .wrench import AbstractWrench, as_wrenches, total_potential, total_wrench

__all__ = ["AbstractSE3Body", "Kirchhoff", "NewtonEuler", "Lagrange", "rigid_body_inertia"]


def rigid_body_inertia(mass: ArrayInput, inertia: ArrayInput, cm: ArrayInput = (0.0, 0.0, 0.0)) -> Inexact[Array, "6 6"]:
    """Generalised inertia 𝕄 (6, 6) of a rigid body about the body origin O, ordering (linear, angular).

    ``mass`` m; ``inertia`` about the centre of mass, principal moments ``(3,)`` or a
    symmetric ``(3, 3)`` tensor, body frame; ``cm`` c ``(3,)`` the centre of mass from O.
    Returns [[m 1, −m ĉ], [m ĉ, 𝕀_G + m(|c|² 1 − c cᵀ)]] (T = ½m|u + Ω × c|² + ½⟨𝕀_G Ω, Ω⟩).
    Raises ``ModelError`` for a mass that is not positive and finite (when concrete) or an
    inertia of another shape; the models check 𝕄 itself (symmetric positive definite).
    """
    _common.positive(mass, "mass")
    m = jnp.asarray(mass, dtype=jnp.float64)
    inertia = jnp.asarray(inertia, dtype=jnp.float64)
    if inertia.shape == (3,):
        inertia = jnp.diag(inertia)
    if inertia.shape != (3, 3):
        raise ModelError(f"'inertia' must be principal moments (3,) or a (3, 3) tensor; got {inertia.shape}")
    c = _common.vector(cm, "cm")
    c_hat = hat(c)
    steiner = m * (jnp.dot(c, c) * jnp.eye(3) - jnp.outer(c, c))
    return jnp.block([[m * jnp.eye(3), -m * c_hat], [m * c_hat, inertia + steiner]])


def _check_inertia6(m: Array) -> Array:
    if m.shape != (6, 6):
        raise ModelError(f"'inertia6' must be a (6, 6) generalised inertia; got shape {m.shape}")
    v = concrete(m)
    if v is None:
        return 0.5 * (m + m.T)
    if not np.all(np.isfinite(v)):
        raise ModelError("'inertia6' must be finite")
    scale = np.max(np.abs(v))
    if np.max(np.abs(v - v.T)) > 1e-12 * scale:
        raise ModelError(f"'inertia6' must be symmetric (max |M − Mᵀ| = {np.max(np.abs(v - v.T)):.3g})")
    eig = np.linalg.eigvalsh(0.5 * (v + v.T))
    if not eig[0] > 1e-14 * max(scale, 1e-300):
        raise ModelError(f"'inertia6' must be positive definite (smallest eigenvalue {eig[0]:.6g})")
    return 0.5 * (m + m.T)


def _split(x):
    """x = [q (4), b (3), v (3), w (3)] → (q, b, v, w)."""
    return x[:4], x[4:7], x[7:10], x[10:13]


class AbstractSE3Body(AbstractModel):
    """Shared parameters, observables and conversions of the three SE(3) formulations.

    Attributes
    ----------
    inertia6 : (6, 6)  𝕄, symmetric positive definite, body components about O, ordering
                       (linear, angular) [mass, mass·length, mass·length²].
    wrench : tuple of AbstractWrench  external force and torque about O (summed).

    State (13,): x = [q (4), b (3), v (3), w (3)] with (v, w) the formulation's velocity
    coordinates. Raises ``ModelError`` for a non-symmetric, non-positive-definite or
    non-finite 𝕄, a wrong shape, or a wrench that is not an ``AbstractWrench``.
    """

    inertia6: Inexact[Array, "6 6"]
    wrench: tuple[AbstractWrench, ...]

    def __init__(self, inertia6: ArrayInput, wrench: AbstractWrench | tuple | list | None = None):
        self.inertia6 = _check_inertia6(jnp.asarray(inertia6, dtype=jnp.float64))
        self.wrench = as_wrenches(wrench)

    @property
    def state_size(self) -> int:
        return 13

    @property
    def versor_index(self) -> int:
        """q0 is x[0] (checked to be unit in every solve's initial state)."""
        return 0

    @abc.abstractmethod
    def _velocity_labels(self) -> list[str]:
        """Names of the six velocity components of this formulation."""

    def state_labels(self) -> list[str]:
        return _common.orientation_labels() + ["b1", "b2", "b3"] + self._velocity_labels()

    # -- conversions between the formulation's velocities and the body twist (u, Ω) -------------
    @abc.abstractmethod
    def body_twist(self, x) -> tuple[Array, Array, Array, Array, Array]:
        """(R, b, u, Ω) of one state: rotation (3, 3), position (3,), body velocities (3,), (3,)."""

    @abc.abstractmethod
    def velocities_from_body(self, rotation, position, u, omega_body) -> tuple[Array, Array]:
        """The formulation's (v, w) from the body twist (u, Ω)."""

    def state_from_body(
        self, q: ArrayInput = _common.IDENTITY_VERSOR, b: ArrayInput = (0.0, 0.0, 0.0),
        u: ArrayInput = (0.0, 0.0, 0.0), Omega: ArrayInput = (0.0, 0.0, 0.0),
    ) -> Inexact[Array, "13"]:
        """State from body velocities: u = Rᵀḃ (body components of v_O) and Ω (body).

        The same call on the three formulations gives the same initial motion.
        """
        q = _common.versor(q)
        b = _common.vector(b, "b")
        rot = rotation_matrix(q)
        v, w = self.velocities_from_body(rot, b, _common.vector(u, "u"), _common.vector(Omega, "Omega"))
        return jnp.concatenate([q, b, v, w])

    def initial_state(
        self, q: ArrayInput = _common.IDENTITY_VERSOR, b: ArrayInput = (0.0, 0.0, 0.0),
        v: ArrayInput = (0.0, 0.0, 0.0), w: ArrayInput = (0.0, 0.0, 0.0),
    ) -> Inexact[Array, "13"]:
        """State [q, b, v, w] in the formulation's own velocity coordinates (see ``state_labels``)."""
        return jnp.concatenate([_common.versor(q), _common.vector(b, "b"), _common.vector(v, "v"), _common.vector(w, "w")])

    def _wrench_spatial(self, t, rotation, position):
        return total_wrench(self.wrench, t, rotation, position)

    def observables(self, x, **context) -> dict[str, Array]:
        """Observables of one state, identical in meaning for the three formulations.

        Keys: ``orientation`` (3, 3) R (q used as given), ``position`` (3,) b,
        ``velocity_body`` (3,) u, ``omega_body`` (3,) Ω, ``velocity_spatial`` (3,) ḃ,
        ``omega_spatial`` (3,) ω, ``xi`` (3,) ξ = ḃ − ω × b, ``momentum_body`` (3,) Q,
        ``angular_momentum_body`` (3,) Γ_O (body, about O), ``momentum_spatial`` (3,) RQ,
        ``angular_momentum_spatial`` (3,) Γ_Ω = RΓ_O + b × RQ (about the fixed origin),
        ``kinetic_energy`` () ½Vᵀ𝕄V, ``energy`` () kinetic + wrench potentials,
        ``versor_norm`` () |q|.
        """
        rot, b, u, omega = self.body_twist(x)
        mom = self.inertia6 @ jnp.concatenate([u, omega])
        q_b, gamma_o = mom[:3], mom[3:]
        q_s = rot @ q_b
        omega_s = rot @ omega
        b_dot = rot @ u
        kinetic = 0.5 * jnp.dot(jnp.concatenate([u, omega]), mom)
        return {
            "orientation": rot,
            "position": b,
            "velocity_body": u,
            "omega_body": omega,
            "velocity_spatial": b_dot,
            "omega_spatial": omega_s,
            "xi": b_dot - jnp.cross(omega_s, b),
            "momentum_body": q_b,
            "angular_momentum_body": gamma_o,
            "momentum_spatial": q_s,
            "angular_momentum_spatial": rot @ gamma_o + jnp.cross(b, q_s),
            "kinetic_energy": kinetic,
            "energy": kinetic + total_potential(self.wrench, rot, b),
            "versor_norm": jnp.linalg.norm(x[:4]),
        }


class Kirchhoff(AbstractSE3Body):
    """Kirchhoff's equations: body-frame (left-invariant) velocities (u, Ω) (the SE(3) paper, eqs. 16–17).

    State (13,): [q, b, u, Ω], u = Rᵀḃ the body components of v_O, Ω = (RᵀṘ)^∨.

        Q̇ = Q × Ω + R_b,   Γ̇_O = Γ_O × Ω + Q × u + M_O,b,   (Q, Γ_O) = 𝕄 (u, Ω),
        q̇ = ½ q Ω♯ (Putkaradze & Rogers, 2.21),   ḃ = R u.

    Integrals without a wrench: kinetic energy, Q_s = RQ and Γ_Ω = RΓ_O + b × Q_s.
    This is the form that carries a general 𝕄, e.g. a body plus the added mass of the
    fluid it moves in (Kirchhoff 1869; Lamb, *Hydrodynamics*, 6th ed., Ch. VI).
    """

    def _velocity_labels(self):
        return ["u1", "u2", "u3", "Omega1", "Omega2", "Omega3"]

    def body_twist(self, x):
        q, b, u, omega = _split(x)
        return rotation_matrix(q), b, u, omega

    def velocities_from_body(self, rotation, position, u, omega_body):
        return u, omega_body

    def vector_field(self, t, x, control=None):
        """ẋ = [½ q Ω♯, R u, 𝕄⁻¹(Q × Ω + R_b, Γ_O × Ω + Q × u + M_O,b)]; ``control`` unused."""
        q, b, u, omega = _split(x)
        rot = rotation_matrix(q)
        force_s, torque_s = self._wrench_spatial(t, rot, b)
        force_b, torque_b = rot.T @ force_s, rot.T @ torque_s
        mom = self.inertia6 @ jnp.concatenate([u, omega])
        q_b, gamma_o = mom[:3], mom[3:]
        rhs = jnp.concatenate(
            [jnp.cross(q_b, omega) + force_b, jnp.cross(gamma_o, omega) + jnp.cross(q_b, u) + torque_b]
        )
        twist_dot = jnp.linalg.solve(self.inertia6, rhs)
        return jnp.concatenate([_common.q_dot_body(q, omega), rot @ u, twist_dot])


class NewtonEuler(AbstractSE3Body):
    """Newton–Euler equations: observer-frame (right-invariant) velocities (ξ, ω) (the SE(3) paper, eqs. 18–19).

    State (13,): [q, b, ξ, ω], ω = (ṘRᵀ)^∨ the spatial angular velocity and ξ = ḃ − ω × b
    the velocity of the body point at the spatial origin (the SE(3) paper, eq. 10a).

    The momenta about the fixed origin, (Q_s, Γ_Ω) = 𝕄_s (ξ, ω) with 𝕄_s = Ad_g⁻ᵀ 𝕄 Ad_g⁻¹
    and Ad_g = [[R, b̂R], [0, R]] (the map (u, Ω) ↦ (ξ, ω)), obey Q̇_s = R_s, Γ̇_Ω = M_Ω.
    Along the motion d/dt Ad_g⁻¹ = −Ad_g⁻¹ ad_(ξ,ω), so (d𝕄_s/dt)(ξ, ω) = −ad_(ξ,ω)ᵀ (Q_s, Γ_Ω)
    = (ω × Q_s, ξ × Q_s + ω × Γ_Ω), and the accelerations are

        𝕄_s (ξ̇, ω̇) = (R_s + Q_s × ω,  M_Ω + Q_s × ξ + Γ_Ω × ω),   M_Ω = M_O,s + b × R_s,

    solved as (ξ̇, ω̇) = Ad_g 𝕄⁻¹ Ad_gᵀ (…);  q̇ = ½ ω♯ q,  ḃ = ξ + ω × b.
    """

    def _velocity_labels(self):
        return ["xi1", "xi2", "xi3", "omega1", "omega2", "omega3"]

    def body_twist(self, x):
        q, b, xi, omega_s = _split(x)
        rot = rotation_matrix(q)
        return rot, b, rot.T @ (xi - jnp.cross(b, omega_s)), rot.T @ omega_s

    def velocities_from_body(self, rotation, position, u, omega_body):
        omega_s = rotation @ omega_body
        return rotation @ u + jnp.cross(position, omega_s), omega_s

    def vector_field(self, t, x, control=None):
        """ẋ = [½ ω♯ q, ξ + ω × b, 𝕄_s⁻¹(R_s + Q_s × ω, M_Ω + Q_s × ξ + Γ_Ω × ω)]; ``control`` unused."""
        q, b, xi, omega_s = _split(x)
        rot = rotation_matrix(q)
        force_s, torque_o = self._wrench_spatial(t, rot, b)
        torque_origin = torque_o + jnp.cross(b, force_s)  # M_Ω
        # body twist V = Ad_g⁻¹ (ξ, ω) and spatial momenta μ_s = Ad_g⁻ᵀ 𝕄 V (eq. 19)
        u = rot.T @ (xi - jnp.cross(b, omega_s))
        omega_b = rot.T @ omega_s
        mom = self.inertia6 @ jnp.concatenate([u, omega_b])
        q_s = rot @ mom[:3]
        gamma_origin = rot @ mom[3:] + jnp.cross(b, q_s)
        r_lin = force_s + jnp.cross(q_s, omega_s)
        r_ang = torque_origin + jnp.cross(q_s, xi) + jnp.cross(gamma_origin, omega_s)
        # 𝕄_s⁻¹ = Ad_g 𝕄⁻¹ Ad_gᵀ, Ad_gᵀ (r_lin, r_ang) = (Rᵀ r_lin, Rᵀ(r_ang − b × r_lin))
        y = jnp.linalg.solve(self.inertia6, jnp.concatenate([rot.T @ r_lin, rot.T @ (r_ang - jnp.cross(b, r_lin))]))
        omega_s_dot = rot @ y[3:]
        xi_dot = rot @ y[:3] + jnp.cross(b, omega_s_dot)
        b_dot = xi + jnp.cross(omega_s, b)
        return jnp.concatenate([_common.q_dot_spatial(q, omega_s), b_dot, xi_dot, omega_s_dot])


class Lagrange(AbstractSE3Body):
    """Lagrange's mixed choice: ḃ in the observer's frame, Ω in the body frame (the SE(3) paper, last section).

    State (13,): [q, b, ḃ, Ω]. With u = Rᵀḃ, (Q, Γ_O) = 𝕄 (u, Ω) = ([A, B; Bᵀ, C]) (u, Ω):

        d/dt (R Q) = R_s                                    (spatial components)
        Γ̇_O + Ω × Γ_O + u × Q = M_O,b                       (body components, about O)

    Expanding d/dt(RQ) = R(Q̇ + Ω × Q) and Q̇ = A(Rᵀb̈ − Ω × u) + BΩ̇, the accelerations
    (Rᵀb̈, Ω̇) solve

        𝕄 (Rᵀb̈, Ω̇) = (Rᵀ R_s − Ω × Q + A(Ω × u),  M_O,b − Ω × Γ_O − u × Q + Bᵀ(Ω × u)),

    and q̇ = ½ q Ω♯ (Putkaradze & Rogers, 2.21).
    """

    def _velocity_labels(self):
        return ["b_dot1", "b_dot2", "b_dot3", "Omega1", "Omega2", "Omega3"]

    def body_twist(self, x):
        q, b, b_dot, omega = _split(x)
        rot = rotation_matrix(q)
        return rot, b, rot.T @ b_dot, omega

    def velocities_from_body(self, rotation, position, u, omega_body):
        return rotation @ u, omega_body

    def vector_field(self, t, x, control=None):
        """ẋ = [½ q Ω♯, ḃ, b̈, Ω̇] from the two balance laws above; ``control`` unused."""
        q, b, b_dot, omega = _split(x)
        rot = rotation_matrix(q)
        force_s, torque_o = self._wrench_spatial(t, rot, b)
        u = rot.T @ b_dot
        mom = self.inertia6 @ jnp.concatenate([u, omega])
        q_b, gamma_o = mom[:3], mom[3:]
        a_blk, b_blk = self.inertia6[:3, :3], self.inertia6[:3, 3:]
        omega_u = jnp.cross(omega, u)
        rhs = jnp.concatenate(
            [
                rot.T @ force_s - jnp.cross(omega, q_b) + a_blk @ omega_u,
                rot.T @ torque_o - jnp.cross(omega, gamma_o) - jnp.cross(u, q_b) + b_blk.T @ omega_u,
            ]
        )
        acc = jnp.linalg.solve(self.inertia6, rhs)
        return jnp.concatenate([_common.q_dot_body(q, omega), b_dot, rot @ acc[:3], acc[3:]])
