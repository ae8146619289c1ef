"""Prototype, measured: a hand-written VJP of the rolling ball's (7.4) core against ``jax.vjp``.

Putkaradze & Rogers, eq. (7.4): κ = [Σ m_i ŝ_i² − 𝕀]⁻¹ [Ω × 𝕀Ω + r Γ̃ × Γ + Σ m_i s_i × a_i].
The reverse sweep of the discrete adjoint spends most of its time in one VJP of the vector
field per replayed stage (715 for the paper ball over [0, 20] at tol 1e-10). Here the VJP of
the core algebra (system matrix, its solve with the symmetric cofactors, the cross products)
is written by hand; the inputs (rails, control, force, rotation matrix) and the kinematic
outputs (θ̇, u, q̇, ż) still go through ``jax.vjp``. Prints the largest difference to
``jax.vjp`` of the whole field (state and all parameters) and the time per VJP in a loop of
715 dependent calls. Not used by the package yet.

Run: ``python benchmarks/proto_ball_field_vjp.py`` (~20 s).
"""

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from bench_derivatives import paper_ball
from rollball_jax.dynamics._linalg import solve3
from rollball_jax.dynamics.ball import _all_masses, ball_state_split, ball_vector_field, system_matrix
from rollball_jax.geometry import matvec, quat_multiply, rotation_matrix, sharp

N_VJP = 715  # the paper ball's replayed stages over [0, 20] at tol 1e-10 (55 steps x 13)


def inputs_and_rest(model, control, t, x):
    """The inputs of (7.4)'s core and the kinematic outputs (θ̇, u, q̇, ż): the part left to
    ``jax.vjp``, so that any rail, control and force works."""
    n = model.n
    theta, theta_dot, q, W, _ = ball_state_split(x, n)
    u = control(t, x)
    lam = rotation_matrix(q)
    gt = matvec(lam.T, model.force(t))
    m, zeta, dz, ddz, td, uu = _all_masses(model, theta, theta_dot, u)
    q_dot = 0.5 * quat_multiply(q, sharp(W))
    ws = matvec(lam, W)
    z_dot = model.radius * jnp.stack([ws[1], -ws[0]])
    ints = (m, zeta, dz, ddz, td, uu, lam[2], gt, W, model.inertia, model.radius, model.g)
    return ints, (theta_dot, u, q_dot, z_dot)


def core_vjp(ints, kbar):
    """Cotangents of ``ints`` (as :func:`inputs_and_rest`) for the cotangent ``kbar`` (3,) of
    κ (7.4), by hand: the system matrix is symmetric, so its solve's cotangent is
    ``w = M⁻¹ κ̄`` and ``M̄ = −w κᵀ``; then the cross-product chain back to the inputs."""
    m, zeta, dz, ddz, td, uu, G, Gt, W, I, r, g = ints
    cross = jnp.cross
    # forward, keeping what the backward pass needs (as ball_vector_field)
    s = r * G + zeta
    a2 = cross(W[None], zeta) + 2.0 * td[:, None] * dz
    acc = g * G + cross(W[None], a2) + (td**2)[:, None] * ddz + uu[:, None] * dz
    c = cross(s, acc)
    IW = I * W
    rhs = cross(W, IW) + r * cross(Gt, G) + jnp.sum(m[:, None] * c, axis=0)
    M = system_matrix(m, s, I)
    # M symmetric: M⁻ᵀ κ̄ = M⁻¹ κ̄; both solves share the cofactors (M is not batched)
    kappa, w = jax.vmap(solve3, in_axes=(None, 0))(M, jnp.stack([rhs, kbar]))
    # through M = Σ m s sᵀ − (Σ m |s|²) 1 − diag(I)
    ks, ws_, wk = jnp.sum(s * kappa, axis=-1), jnp.sum(s * w, axis=-1), jnp.sum(w * kappa)
    s_bar = m[:, None] * (-w[None] * ks[:, None] - kappa[None] * ws_[:, None] + 2.0 * wk * s)
    m_bar = -ws_ * ks + wk * jnp.sum(s * s, axis=-1) + jnp.sum(c * w[None], axis=-1)
    I_bar = w * kappa + W * cross(w, W)
    # through rhs
    W_bar = cross(IW, w) + I * cross(w, W)
    Gt_bar = r * cross(G, w)
    G_bar = r * cross(w, Gt)
    r_bar = jnp.sum(w * cross(Gt, G))
    cb = m[:, None] * w[None]
    s_bar = s_bar + cross(acc, cb)
    accb = cross(cb, s)
    g_bar = jnp.sum(accb * G[None])
    G_bar = G_bar + g * jnp.sum(accb, axis=0)
    a2b = cross(accb, W[None])
    W_bar = W_bar + jnp.sum(cross(a2, accb), axis=0) + jnp.sum(cross(zeta, a2b), axis=0)
    td_bar = 2.0 * td * jnp.sum(accb * ddz, axis=-1) + 2.0 * jnp.sum(a2b * dz, axis=-1)
    ddz_bar = (td**2)[:, None] * accb
    uu_bar = jnp.sum(accb * dz, axis=-1)
    dz_bar = uu[:, None] * accb + 2.0 * td[:, None] * a2b
    zeta_bar = cross(a2b, W[None]) + s_bar
    r_bar = r_bar + jnp.sum(s_bar * G[None])
    G_bar = G_bar + r * jnp.sum(s_bar, axis=0)
    return (m_bar, zeta_bar, dz_bar, ddz_bar, td_bar, uu_bar, G_bar, Gt_bar, W_bar, I_bar, r_bar, g_bar)


def main():
    ball, ctl, x0 = paper_ball()
    x = x0.at[3:6].set(0.05).at[10:13].set(jnp.array([0.01, -0.02, 0.03]))
    params, static = eqx.partition((ball, ctl), eqx.is_inexact_array)
    pflat, unravel = ravel_pytree(params)
    n = ball.n

    def auto(pf, t, y, ct):
        _, pull = jax.vjp(lambda yy, pp: ball_vector_field(t, yy, *eqx.combine(unravel(pp), static)), y, pf)
        return pull(ct)

    def hand(pf, t, y, ct):
        (ints, _), pull = jax.vjp(lambda yy, pp: inputs_and_rest(*eqx.combine(unravel(pp), static), t, yy), y, pf)
        rest_ct = (ct[:n], ct[n:2 * n], ct[2 * n:2 * n + 4], ct[2 * n + 7:])
        return pull((core_vjp(ints, ct[2 * n + 4:2 * n + 7]), rest_ct))

    ct = jnp.asarray(np.random.default_rng(0).standard_normal(x.shape))
    (ay, ap), (hy, hp) = auto(pflat, 0.05, x, ct), hand(pflat, 0.05, x, ct)
    dy = float(jnp.max(jnp.abs(ay - hy)) / jnp.max(jnp.abs(ay)))
    dp = float(jnp.max(jnp.abs(ap - hp)) / jnp.max(jnp.abs(ap)))
    print(f"hand vs jax.vjp, max relative difference: state {dy:.1e}, {pflat.size} parameters {dp:.1e}")
    if not (dy < 1e-12 and dp < 1e-12):
        raise SystemExit("the hand-written VJP disagrees with jax.vjp")

    def make(fn):  # N_VJP dependent VJPs, every parameter cotangent accumulated
        def body(i, c):
            lam, acc = c
            gy, gp = fn(pflat, 0.05 + 1e-3 * i, x + 1e-9 * lam, lam)
            return lam + 1e-3 * gy, acc + gp

        return jax.jit(lambda: jax.lax.fori_loop(0, N_VJP, body, (x, pflat)))

    fns = {"jax.vjp": make(auto), "hand-written core": make(hand)}
    for f in fns.values():
        jax.block_until_ready(f())
    res = {k: [] for k in fns}
    for _ in range(40):  # alternating, so both see the same machine speed
        for k, f in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f())
            res[k].append(time.perf_counter() - t0)
    for k, v in res.items():
        print(f"{k:18s} {np.median(v) / N_VJP * 1e6:.3f} us per VJP (median of 40 loops of {N_VJP})")


if __name__ == "__main__":
    main()
