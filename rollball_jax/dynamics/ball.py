"""Rolling ball vector field: ODE (7.2) with Ω̇ = κ from (7.4) (Putkaradze & Rogers, sec. 5.3, 7)."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Inexact

from .._typing import FloatInput
from ..geometry import matvec, quat_multiply, rotation_matrix, sharp
from ._linalg import solve3


def ball_state_split(x: Inexact[Array, " N"], n: int):
    """Split x = [θ (n), θ̇ (n), q (4), Ω (3), z (2)] (7.1) into its parts."""
    return x[:n], x[n : 2 * n], x[2 * n : 2 * n + 4], x[2 * n + 4 : 2 * n + 7], x[2 * n + 7 : 2 * n + 9]


def _all_masses(model, theta, theta_dot, u):
    """Stack m0 (index 0, ζ0 = χ0 fixed) with the point masses: arrays of length n+1."""
    zeta, dzeta, ddzeta = model.rails.evaluate(theta)
    zero3 = jnp.zeros((1, 3), dtype=zeta.dtype)
    zero1 = jnp.zeros((1,), dtype=zeta.dtype)
    m = jnp.concatenate([model.m0[None], model.masses])
    zeta = jnp.concatenate([model.chi0[None], zeta])
    dzeta = jnp.concatenate([zero3, dzeta])
    ddzeta = jnp.concatenate([zero3, ddzeta])
    theta_dot = jnp.concatenate([zero1, theta_dot])
    u = jnp.concatenate([zero1, u])
    return m, zeta, dzeta, ddzeta, theta_dot, u


def system_matrix(m: Inexact[Array, " n1"], s: Inexact[Array, "n1 3"], inertia: Inexact[Array, "3"]) -> Inexact[Array, "3 3"]:
    """Σ_i m_i ŝ_i² − 𝕀 (Putkaradze & Rogers, eq. 5.23/7.4), using ŝ² = s sᵀ − |s|² 1.

    Negative definite whenever the moments d_i are positive.
    """
    ms = m[:, None] * s
    # Σ m_i s_i s_iᵀ, column by column (no dot, see geometry.matvec)
    ss = jnp.stack([jnp.sum(ms * s[:, k, None], axis=0) for k in range(3)], axis=-1)
    trace = jnp.sum(m * jnp.sum(s * s, axis=-1))
    return ss - trace * jnp.eye(3) - jnp.diag(inertia)


def ball_vector_field(t, x: FloatInput[" N"], model, control) -> Inexact[Array, " N"]:
    """Right-hand side of the rolling ball ODE (Putkaradze & Rogers, eq. 7.2).

    Parameters
    ----------
    t : ()             time.
    x : (2n+9,)        state [θ, θ̇, q, Ω, z] (7.1): rail parameters, their rates, versor
                       (scalar first, body → spatial), body angular velocity, GC position
                       (spatial e1, e2).
    model : Ball
    control : callable t -> u (n,), the prescribed θ̈ (7.2).

    Returns ẋ = [θ̇, u, ½ q Ω♯, κ, ((ΛΩ) × r e3)₁₂] with κ of (7.4):

        κ = [Σ m_i ŝ_i² − 𝕀]⁻¹ [Ω × 𝕀Ω + r Γ̃ × Γ
             + Σ m_i s_i × {gΓ + Ω × (Ω × ζ_i + 2θ̇_i ζ′_i) + θ̇_i² ζ″_i + θ̈_i ζ′_i}],

    s_i = rΓ + ζ_i, Γ = Λᵀe3, Γ̃ = ΛᵀF_e (7.6); the sums include m0 with ζ0 = χ0.
    Λ is built from q by (2.15) without normalising q.
    """
    n = model.n
    theta, theta_dot, q, omega_body, _ = ball_state_split(x, n)
    u = control(t, x) if n else jnp.zeros((0,), dtype=x.dtype)
    r = model.radius
    lam = rotation_matrix(q)  # (2.15)
    gamma = lam[2]  # Γ = Λᵀ e3 (7.6)
    gamma_tilde = matvec(lam.T, model.force(t))  # Γ̃ = Λᵀ F_e
    m, zeta, dzeta, ddzeta, td, uu = _all_masses(model, theta, theta_dot, u)
    s = r * gamma + zeta  # s_i = rΓ + ζ_i
    inertia_omega = model.inertia * omega_body
    accel = (
        model.g * gamma
        + jnp.cross(omega_body, jnp.cross(omega_body, zeta) + 2.0 * td[:, None] * dzeta)
        + (td**2)[:, None] * ddzeta
        + uu[:, None] * dzeta
    )
    rhs = (
        jnp.cross(omega_body, inertia_omega)
        + r * jnp.cross(gamma_tilde, gamma)
        + jnp.sum(m[:, None] * jnp.cross(s, accel), axis=0)
    )
    omega_dot = solve3(system_matrix(m, s, model.inertia), rhs)  # κ (7.4)
    q_dot = 0.5 * quat_multiply(q, sharp(omega_body))  # (2.21)
    omega_spatial = matvec(lam, omega_body)  # ω = ΛΩ (7.6)
    z_dot = r * jnp.stack([omega_spatial[1], -omega_spatial[0]])  # (ω × r e3)₁₂
    return jnp.concatenate([theta_dot, u, q_dot, omega_dot, z_dot])
