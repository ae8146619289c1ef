"""Prototype, measured: a hand-written VJP of the rolling ball's (7.4) core against ``jax.vjp``.

Putkaradze & Rogers, eq. (7.4): κ = [Σ m_i ŝ_i² − 𝕀]⁻¹ [Ω × 𝕀Ω + r Γ̃ × Γ + Σ m_i s_i × a_i].
The reverse sweep of the discrete adjoint spends most of its time in one VJP of the vector
field per replayed stage (715 for the paper ball over [0, 20] at tol 1e-10). Here the VJP of
the core algebra (system matrix, its solve with the symmetric cofactors, the cross products)
is written by hand; the inputs (rails, control, force, rotation matrix) and the kinematic
outputs (θ̇, u, q̇, ż) still go through ``jax.vjp``. Prints the largest difference to
``jax.vjp`` of the whole field (state and all parameters) and the time per VJP in a loop of
715 dependent calls. Not used by the package yet (see the closing note of stop 41).

Run: ``python benchmarks/proto_ball_field_vjp.py`` (~20 s).
"""

import time

import jax, jax.numpy as jnp, numpy as np, equinox as eqx
from jax.flatten_util import ravel_pytree
from bench_derivatives import paper_ball
from rollball_jax.dynamics.ball import ball_state_split, _all_masses, ball_vector_field
from rollball_jax.geometry import matvec, quat_multiply, rotation_matrix, sharp

def inputs_and_rest(model, control, t, x):
    n = model.n
    theta, theta_dot, q, W, _ = ball_state_split(x, n)
    u = control(t, x)
    r = model.radius
    lam = rotation_matrix(q)
    gamma = lam[2]
    gt = matvec(lam.T, model.force(t))
    m, zeta, dz, ddz, td, uu = _all_masses(model, theta, theta_dot, u)
    q_dot = 0.5 * quat_multiply(q, sharp(W))
    ws = matvec(lam, W)
    z_dot = r * jnp.stack([ws[1], -ws[0]])
    ints = (m, zeta, dz, ddz, td, uu, gamma, gt, W, model.inertia, r, model.g)
    return ints, (theta_dot, u, q_dot, z_dot)

def cross(a, b): return jnp.cross(a, b)
def cof(M):
    c0 = jnp.cross(M[1], M[2]); c1 = jnp.cross(M[2], M[0]); c2 = jnp.cross(M[0], M[1])
    det = jnp.sum(M[0] * c0)
    C = jnp.stack([c0, c1, c2])  # rows c_k; inverse = C.T/det (columns c_k)
    return C, det
def solve_c(C, det, b):  # a^{-1} b = sum_k c_k b_k / det
    return (C[0] * b[0] + C[1] * b[1] + C[2] * b[2]) / det

def core_vjp(ints, kbar):
    m, zeta, dz, ddz, td, uu, G, Gt, W, I, r, g = ints
    s = r * G + zeta
    a1 = cross(W[None], zeta)
    a2 = a1 + 2.0 * td[:, None] * dz
    acc = g * G + cross(W[None], a2) + (td**2)[:, None] * ddz + uu[:, None] * dz
    c = cross(s, acc)
    IW = I * W
    rhs = cross(W, IW) + r * cross(Gt, G) + jnp.sum(m[:, None] * c, axis=0)
    ms = m[:, None] * s
    ss = jnp.stack([jnp.sum(ms * s[:, k, None], axis=0) for k in range(3)], axis=-1)
    tr = jnp.sum(m * jnp.sum(s * s, axis=-1))
    M = ss - tr * jnp.eye(3) - jnp.diag(I)
    C, det = cof(M)
    kappa = solve_c(C, det, rhs)
    w = solve_c(C, det, kbar)   # M symmetric: M^{-T} kbar = M^{-1} kbar
    # system matrix part
    ks = jnp.sum(s * kappa, axis=-1); wsd = jnp.sum(s * w, axis=-1); wk = jnp.sum(w * kappa)
    s_bar = m[:, None] * (-w[None] * ks[:, None] - kappa[None] * wsd[:, None] + 2.0 * wk * s)
    m_bar = -wsd * ks + wk * jnp.sum(s * s, axis=-1)
    I_bar = -(-w * kappa)  # Ī from -diag(M): M̄_ii = -w_i κ_i; Ī = -M̄_ii
    # rhs part
    W_bar = cross(IW, w) + I * cross(w, W)
    I_bar = I_bar + W * cross(w, W)
    Gt_bar = r * cross(G, w)
    G_bar = r * cross(w, Gt)
    r_bar = jnp.sum(w * cross(Gt, G))
    m_bar = m_bar + jnp.sum(c * w[None], axis=-1)
    cb = m[:, None] * w[None]
    s_bar = s_bar + cross(acc, cb)
    accb = cross(cb, s)
    g_bar = jnp.sum(accb * G[None])
    G_bar = G_bar + g * jnp.sum(accb, axis=0)
    a2b = cross(accb, W[None])
    W_bar = W_bar + jnp.sum(cross(a2, accb), axis=0)
    td_bar = 2.0 * td * jnp.sum(accb * ddz, axis=-1)
    ddz_bar = (td**2)[:, None] * accb
    uu_bar = jnp.sum(accb * dz, axis=-1)
    dz_bar = uu[:, None] * accb
    zeta_bar = cross(a2b, W[None])
    W_bar = W_bar + jnp.sum(cross(zeta, a2b), axis=0)
    td_bar = td_bar + 2.0 * jnp.sum(a2b * dz, axis=-1)
    dz_bar = dz_bar + 2.0 * td[:, None] * a2b
    r_bar = r_bar + jnp.sum(s_bar * G[None])
    G_bar = G_bar + r * jnp.sum(s_bar, axis=0)
    zeta_bar = zeta_bar + s_bar
    return kappa, (m_bar, zeta_bar, dz_bar, ddz_bar, td_bar, uu_bar, G_bar, Gt_bar, W_bar, I_bar, r_bar, g_bar)

ball, ctl, x0 = paper_ball()
x = x0.at[3:6].set(0.05).at[10:13].set(jnp.array([0.01, -0.02, 0.03]))
params, static = eqx.partition((ball, ctl), eqx.is_inexact_array)
pflat, unravel = ravel_pytree(params)
n = ball.n
def vf(pf, t, y):
    m, c = eqx.combine(unravel(pf), static)
    return ball_vector_field(t, y, m, c)
def hand(pf, t, y, ct):
    def f(yy, pp):
        m, c = eqx.combine(unravel(pp), static)
        return inputs_and_rest(m, c, t, yy)
    (ints, rest), pull = jax.vjp(f, y, pf)
    kbar = ct[2 * n + 4: 2 * n + 7]
    _, ib = core_vjp(ints, kbar)
    rest_ct = (ct[:n], ct[n:2 * n], ct[2 * n:2 * n + 4], ct[2 * n + 7:])
    ib = tuple(b.astype(a.dtype) for a, b in zip(ints, ib))
    return pull((ib, rest_ct))
def auto(pf, t, y, ct):
    _, pull = jax.vjp(lambda yy, pp: vf(pp, t, yy), y, pf)
    return pull(ct)
rng = np.random.default_rng(0)
ct = jnp.asarray(rng.standard_normal(x.shape))
a = auto(pflat, 0.05, x, ct); b = hand(pflat, 0.05, x, ct)
print("diff y", float(jnp.max(jnp.abs(a[0] - b[0]))), "diff p", float(jnp.max(jnp.abs(a[1] - b[1]))), float(jnp.max(jnp.abs(a[1]))))
N = 715
def make(fn):
    def body(i, c):
        lam, acc = c
        gy, gp = fn(pflat, 0.05 + 1e-3 * i, x + 1e-9 * lam, lam)
        return lam + 1e-3 * gy, acc + gp
    return jax.jit(lambda: jax.lax.fori_loop(0, N, body, (x, pflat)))
fns = {"auto": make(auto), "hand": make(hand)}
for f in fns.values(): jax.block_until_ready(f())
res = {k: [] for k in fns}
for r in range(40):
    for k, f in fns.items():
        t0 = time.perf_counter(); jax.block_until_ready(f()); res[k].append(time.perf_counter() - t0)
for k, v in res.items(): print(k, f"{np.median(v)/N*1e6:.3f} us")
