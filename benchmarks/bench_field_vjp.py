"""The rolling ball's vector-field VJP: the package's (the core of (7.4) by hand) against ``jax.vjp``.

Putkaradze & Rogers, eq. (7.4): κ = [Σ m_i ŝ_i² − 𝕀]⁻¹ [Ω × 𝕀Ω + r Γ̃ × Γ + Σ m_i s_i × a_i].
The reverse sweep of the discrete adjoint spends most of its time in one VJP of the vector
field per replayed stage (715 for the paper ball over [0, 20] at tol 1e-10). The package's
``Ball.vector_field_vjp`` (``rollball_jax.dynamics.ball.ball_vector_field_vjp``)
differentiates the core algebra by hand and the rest (rails, control, force, rotation
matrix, kinematic rows) with ``jax.vjp``; the sweep calls it through
``discrete_adjoint.ModelField.vjp``. Prints the largest difference to ``jax.vjp`` of the
whole field (state and all parameters; exits with an error above 1e-12 relative) and the
time per VJP in a loop of 715 dependent calls, the two loops timed alternately.

Run: ``python benchmarks/bench_field_vjp.py`` (~20 s). Last line: ``vjp_speedup: X``.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from bench_derivatives import paper_ball
from rollball_jax._discrete_adjoint import model_field

N_VJP = 715  # the paper ball's replayed stages over [0, 20] at tol 1e-10 (55 steps x 13)


def main():
    ball, ctl, x0 = paper_ball()
    x = x0.at[3:6].set(0.05).at[10:13].set(jnp.array([0.01, -0.02, 0.03]))
    vf, params = model_field(ball, ctl)
    pflat, unravel = ravel_pytree(params)

    def auto(pf, t, y, ct):
        _, pull = jax.vjp(lambda yy, pp: vf(unravel(pp), t, yy), y, pf)
        return pull(ct)

    def package(pf, t, y, ct):
        y_bar, p_bar = vf.vjp(unravel(pf), t, y, ct)
        return y_bar, ravel_pytree(p_bar)[0]

    ct = jnp.asarray(np.random.default_rng(0).standard_normal(x.shape))
    (ay, ap), (hy, hp) = jax.jit(auto)(pflat, 0.05, x, ct), jax.jit(package)(pflat, 0.05, x, ct)
    dy = float(jnp.max(jnp.abs(ay - hy)) / jnp.max(jnp.abs(ay)))
    dp = float(jnp.max(jnp.abs(ap - hp)) / jnp.max(jnp.abs(ap)))
    print(f"Ball.vector_field_vjp vs jax.vjp, max relative difference: state {dy:.1e}, {pflat.size} parameters {dp:.1e}")
    if not (dy < 1e-12 and dp < 1e-12):
        raise SystemExit("the package's VJP disagrees with jax.vjp")

    def make(fn):  # N_VJP dependent VJPs, every parameter cotangent accumulated
        def body(i, c):
            lam, acc = c
            gy, gp = fn(pflat, 0.05 + 1e-3 * i, x + 1e-9 * lam, lam)
            return lam + 1e-3 * gy, acc + gp

        return jax.jit(lambda: jax.lax.fori_loop(0, N_VJP, body, (x, pflat)))

    fns = {"jax.vjp": make(auto), "Ball.vector_field_vjp": make(package)}
    for f in fns.values():
        jax.block_until_ready(f())
    res = {k: [] for k in fns}
    for _ in range(40):  # alternating, so both see the same machine speed
        for k, f in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f())
            res[k].append(time.perf_counter() - t0)
    med = {k: np.median(v) / N_VJP * 1e6 for k, v in res.items()}
    for k, v in med.items():
        print(f"{k:22s} {v:.3f} us per VJP (median of 40 loops of {N_VJP})")
    print(f"vjp_speedup: {med['jax.vjp'] / med['Ball.vector_field_vjp']:.2f}")


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " ")).parse_args()  # --help
    main()
