"""Rolling ball vector field: ODE (7.2) with Ω̇ = κ from (7.4) (Putkaradze & Rogers, sec. 5.3, 7).

The field is split in two: :func:`ball_field_parts` (rails, control, force, rotation
matrix, and the kinematic rows θ̇, u, q̇, ż of (7.2)) and :func:`ball_kappa`, the algebraic
core of (7.4). :func:`ball_vector_field_vjp` differentiates the first with ``jax.vjp`` (so
any rail, control and force works) and the core by hand (:func:`ball_kappa_vjp`); the
discrete adjoint's reverse sweep evaluates it once per replayed stage.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Inexact

from .._typing import FloatInput
from .._checks import control_value
from ..geometry import matvec, quat_multiply, rotation_matrix, sharp
from ._linalg import solve3

__all__ = [
    "ball_vector_field", "ball_vector_field_vjp", "system_matrix", "BallCore", "ball_field_parts", "ball_kappa",
    "ball_kappa_vjp"
]


def ball_state_split(x: Inexact[Array, " N"], n: int):
    """Split x = [θ (n), θ̇ (n), q (4), Ω (3), z (2)] (7.1) into its parts."""
    return x[:n], x[n : 2 * n], x[2 * n : 2 * n + 4], x[2 * n + 4 : 2 * n + 7], x[2 * n + 7 : 2 * n + 9]


def all_masses(model, theta, theta_dot, u):
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


class BallCore(NamedTuple):
    """Inputs of the core of (7.4), body frame; index 0 of the per-mass arrays is m0 with
    ζ0 = χ0 (``n1 = n + 1``)."""

    m: Inexact[Array, " n1"]  # masses
    zeta: Inexact[Array, "n1 3"]  # ζ_i, GC → mass
    dzeta: Inexact[Array, "n1 3"]  # ζ′_i
    ddzeta: Inexact[Array, "n1 3"]  # ζ″_i
    theta_dot: Inexact[Array, " n1"]  # θ̇_i
    u: Inexact[Array, " n1"]  # θ̈_i (the control)
    gamma: Inexact[Array, "3"]  # Γ = Λᵀe3
    gamma_tilde: Inexact[Array, "3"]  # Γ̃ = ΛᵀF_e
    omega: Inexact[Array, "3"]  # Ω
    inertia: Inexact[Array, "3"]  # 𝕀 = diag(d1, d2, d3)
    radius: Inexact[Array, ""]
    g: Inexact[Array, ""]


def ball_field_parts(t, x: FloatInput[" N"], model, control):
    """``(core, (θ̇ (n,), u (n,), q̇ (4,), ż (2,)))``: the inputs of (7.4)'s core
    (:class:`BallCore`) and the other rows of (7.2), ``q̇ = ½ q Ω♯`` (2.21) and
    ``ż = ((ΛΩ) × r e3)₁₂``. Arguments as :func:`ball_vector_field`."""
    n = model.n
    theta, theta_dot, q, omega_body, _ = ball_state_split(x, n)
    u = control_value(control(t, x), n) if n else jnp.zeros((0,), dtype=x.dtype)
    r = model.radius
    lam = rotation_matrix(q)  # (2.15)
    gamma = lam[2]  # Γ = Λᵀ e3 (7.6)
    gamma_tilde = matvec(lam.T, model.force(t))  # Γ̃ = Λᵀ F_e
    m, zeta, dzeta, ddzeta, td, uu = all_masses(model, theta, theta_dot, u)
    core = BallCore(m, zeta, dzeta, ddzeta, td, uu, gamma, gamma_tilde, omega_body, model.inertia, r, model.g)
    q_dot = 0.5 * quat_multiply(q, sharp(omega_body))  # (2.21)
    omega_spatial = matvec(lam, omega_body)  # ω = ΛΩ (7.6)
    z_dot = r * jnp.stack([omega_spatial[1], -omega_spatial[0]])  # (ω × r e3)₁₂
    return core, (theta_dot, u, q_dot, z_dot)


def _core_terms(c: BallCore):
    """``s_i = rΓ + ζ_i``, ``a2_i = Ω × ζ_i + 2θ̇_i ζ′_i``, the accelerations
    ``acc_i = gΓ + Ω × a2_i + θ̇_i² ζ″_i + θ̈_i ζ′_i``, ``s_i × acc_i`` and the right-hand
    side of (7.4)."""
    s = c.radius * c.gamma + c.zeta
    a2 = jnp.cross(c.omega, c.zeta) + 2.0 * c.theta_dot[:, None] * c.dzeta
    acc = c.g * c.gamma + jnp.cross(c.omega, a2) + (c.theta_dot**2)[:, None] * c.ddzeta + c.u[:, None] * c.dzeta
    s_x_acc = jnp.cross(s, acc)
    rhs = (jnp.cross(c.omega, c.inertia * c.omega) + c.radius * jnp.cross(c.gamma_tilde, c.gamma)
           + jnp.sum(c.m[:, None] * s_x_acc, axis=0))
    return s, a2, acc, s_x_acc, rhs


def ball_kappa(c: BallCore) -> Inexact[Array, "3"]:
    """κ = Ω̇ of (7.4):

        κ = [Σ m_i ŝ_i² − 𝕀]⁻¹ [Ω × 𝕀Ω + r Γ̃ × Γ
             + Σ m_i s_i × {gΓ + Ω × (Ω × ζ_i + 2θ̇_i ζ′_i) + θ̇_i² ζ″_i + θ̈_i ζ′_i}].
    """
    s, _, _, _, rhs = _core_terms(c)
    return solve3(system_matrix(c.m, s, c.inertia), rhs)


def ball_kappa_vjp(c: BallCore, kappa_bar: Inexact[Array, "3"]) -> BallCore:
    """Cotangent of every input of :func:`ball_kappa` for the cotangent ``kappa_bar``
    ``(3,)`` of κ, written by hand (equal to ``jax.vjp`` of :func:`ball_kappa` to rounding;
    tested). With the symmetric system matrix ``M = Σ m s sᵀ − (Σ m|s|²)1 − 𝕀`` and
    ``w = M⁻¹ κ̄`` (one solve sharing the cofactors of κ's): ``M̄ = −w κᵀ``, hence
    ``s̄_i = m_i[−w(κ·s_i) − κ(w·s_i) + 2(w·κ)s_i]``, ``m̄_i = −(w·s_i)(κ·s_i) + (w·κ)|s_i|²``,
    ``𝕀̄ = w ⊙ κ`` (+ the rhs term); the cotangent of the rhs is ``w``, followed back through
    the cross products."""
    cross = jnp.cross
    m, zeta, dz, ddz, td, uu, G, Gt, W, I, r, g = c
    s, a2, acc, s_x_acc, rhs = _core_terms(c)
    M = system_matrix(m, s, I)
    kappa, w = jax.vmap(solve3, in_axes=(None, 0))(M, jnp.stack([rhs, kappa_bar]))  # M symmetric: M⁻ᵀ = M⁻¹
    ks, ws, wk = jnp.sum(s * kappa, axis=-1), jnp.sum(s * w, axis=-1), jnp.sum(w * kappa)
    s_bar = m[:, None] * (-w[None] * ks[:, None] - kappa[None] * ws[:, None] + 2.0 * wk * s)
    m_bar = -ws * ks + wk * jnp.sum(s * s, axis=-1) + jnp.sum(s_x_acc * w[None], axis=-1)
    I_bar = w * kappa + W * cross(w, W)
    IW = I * W
    W_bar = cross(IW, w) + I * cross(w, W)
    Gt_bar = r * cross(G, w)
    G_bar = r * cross(w, Gt)
    r_bar = jnp.sum(w * cross(Gt, G))
    mw = m[:, None] * w[None]  # cotangent of s_i × acc_i
    s_bar = s_bar + cross(acc, mw)
    acc_bar = cross(mw, s)
    g_bar = jnp.sum(acc_bar * G[None])
    G_bar = G_bar + g * jnp.sum(acc_bar, axis=0)
    a2_bar = cross(acc_bar, W[None])
    W_bar = W_bar + jnp.sum(cross(a2, acc_bar), axis=0) + jnp.sum(cross(zeta, a2_bar), axis=0)
    td_bar = 2.0 * td * jnp.sum(acc_bar * ddz, axis=-1) + 2.0 * jnp.sum(a2_bar * dz, axis=-1)
    ddz_bar = (td**2)[:, None] * acc_bar
    uu_bar = jnp.sum(acc_bar * dz, axis=-1)
    dz_bar = uu[:, None] * acc_bar + 2.0 * td[:, None] * a2_bar
    zeta_bar = cross(a2_bar, W[None]) + s_bar
    r_bar = r_bar + jnp.sum(s_bar * G[None])
    G_bar = G_bar + r * jnp.sum(s_bar, axis=0)
    return BallCore(m_bar, zeta_bar, dz_bar, ddz_bar, td_bar, uu_bar, G_bar, Gt_bar, W_bar, I_bar, r_bar, g_bar)


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

    Returns ẋ = [θ̇, u, ½ q Ω♯, κ, ((ΛΩ) × r e3)₁₂] with κ of (7.4) (:func:`ball_kappa`),
    s_i = rΓ + ζ_i, Γ = Λᵀe3, Γ̃ = ΛᵀF_e (7.6); the sums include m0 with ζ0 = χ0.
    Λ is built from q by (2.15) without normalising q.
    """
    core, (theta_dot, u, q_dot, z_dot) = ball_field_parts(t, x, model, control)
    return jnp.concatenate([theta_dot, u, q_dot, ball_kappa(core), z_dot])


def ball_vector_field_vjp(t, x: FloatInput[" N"], model, control, ct: Inexact[Array, " N"]):
    """Vector–Jacobian product of the rolling ball's field (7.2) with κ of (7.4).

    Arguments as :func:`ball_vector_field`; ``ct`` ``(2n+9,)`` is the cotangent of its
    value ẋ (same layout as the state (7.1)). Returns ``(x̄ (2n+9,), model̄, control̄)``:
    the cotangents of the state and of the inexact array leaves of ``model`` and
    ``control`` (pytrees like them, ``None`` at the other leaves, as ``eqx.filter_vjp``).
    The core of (7.4) is differentiated by :func:`ball_kappa_vjp`, the rest by
    ``eqx.filter_vjp`` of :func:`ball_field_parts`. Raises nothing of its own (the
    model was validated when built)."""
    ct_theta_dot, ct_u, ct_q_dot, ct_kappa, ct_z_dot = ball_state_split(ct, model.n)
    (core, _), pull = eqx.filter_vjp(lambda x_, mc: ball_field_parts(t, x_, *mc), x, (model, control))
    x_bar, (model_bar, control_bar) = pull((ball_kappa_vjp(core, ct_kappa), (ct_theta_dot, ct_u, ct_q_dot, ct_z_dot)))
    return x_bar, model_bar, control_bar
