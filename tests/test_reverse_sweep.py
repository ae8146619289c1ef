"""The hand-written reverse sweep (reverse mode of the discrete adjoint).

Its value is checked against forward mode of the same discrete map (the replay's JVP, an
independent route: no transpose involved), for cotangents on every save row, the one at
t0 included, and on every parameter leaf, with step-stop and with dense saves; under
``jax.vmap``; with a step buffer that is not a whole number of chunks; and the reverse
pass is checked to be the sweep (not JAX's transpose of the replay, which gives the same
numbers more slowly).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from conftest import PAPER_BALL_X0, make_paper_ball

TOL = 1e-10
# Save times: t0, one inside the first control ramp (kinks at 0.1 and 0.2), later ones.
TS = jnp.array([0.0, 0.15, 0.5, 1.0, 2.0, 3.0])


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _problem(dense=False, ts=TS):
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    params, static = eqx.partition((ball, ctl, jnp.asarray(PAPER_BALL_X0)), eqx.is_inexact_array)

    def traj(p):
        model, control, x0 = eqx.combine(p, static)
        return rb.trajectory(model, control, x0, ts, rtol=TOL, atol=TOL, dense=dense)

    return traj, params


@pytest.mark.slow
def test_sweep_equals_forward_mode_on_every_save_and_parameter():
    """⟨c, ∂X/∂p⟩ for a seeded random cotangent c on all six save rows (t0's row goes to
    x0 directly): reverse mode (the sweep) vs the contraction of the forward-mode Jacobian
    over all 75 parameters (60 entries of the model/control leaves, 15 of x0). Measured
    4e-16 relative; bound 1e-12 (the rounding of ~60 recorded steps, amplified by the
    motion's sensitivity, is far below it; a wrong term is not)."""
    traj, params = _problem()
    rng = np.random.default_rng(20261204)
    c = jnp.asarray(rng.standard_normal((TS.shape[0], 15)))
    rev = jax.jit(lambda p: jax.vjp(traj, p)[1](c)[0])(params)
    J = jax.jit(jax.jacfwd(traj))(params)
    fwd = jax.tree.map(lambda j: jnp.tensordot(c, j, axes=2), J)
    for leaf_rev, leaf_fwd in zip(jax.tree.leaves(rev), jax.tree.leaves(fwd)):
        assert np.all(np.isfinite(leaf_rev))
    r, f = jax.flatten_util.ravel_pytree(rev)[0], jax.flatten_util.ravel_pytree(fwd)[0]
    assert r.shape == (75,)
    assert rel(r, f) < 1e-12
    # the x0 row of t0 enters exactly once: perturbing only c[0] moves ∂/∂x0 by c[0]
    c0 = c.at[0].add(1.0)
    rev0 = jax.jit(lambda p: jax.vjp(traj, p)[1](c0)[0])(params)
    np.testing.assert_allclose(np.asarray(rev0[2] - rev[2]), np.ones(15), rtol=0, atol=1e-12)


@pytest.mark.slow
def test_sweep_under_vmap_equals_each_member():
    """jax.vmap of the gradient over three initial states: equal to jax.vmap of the
    forward-mode Jacobian (the same batched recording, so the same steps) to 1e-13, and to
    each member's own gradient to 1e-8: under vmap the field's executor conditional becomes
    a select, so the recording's error estimates, and possibly a step, move at rounding
    level. A one-mass disk driven by the paper's ramp (kinks at 0.1 and 0.2): the batching
    rules do not depend on the model, and its programs compile in about a third of the
    paper ball's time (5 s instead of 14 s for this test). Measured 8e-16, and 0.9e-12 to
    6e-12 (the paper ball: 5e-16, 2e-12 to 5e-12)."""
    disk, ctl = rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.9)]), rb.PaperStep.ball(1)

    def gc1(x0):
        return rb.final_gc(disk, ctl, x0, (0.0, 3.0), rtol=TOL, atol=TOL)[0]

    x0 = jnp.asarray(disk.initial_state(theta=[-1.0]))
    xs = jnp.stack([x0, x0.at[1].add(0.05), x0.at[3].add(-0.03)])
    batched = jax.jit(jax.vmap(jax.grad(gc1)))(xs)
    batched_fwd = jax.jit(jax.vmap(jax.jacfwd(gc1)))(xs)
    assert rel(batched, batched_fwd) < 1e-13
    grad = jax.jit(jax.grad(gc1))
    assert max(rel(batched[i], grad(xs[i])) for i in range(3)) < 1e-8
    assert rel(batched[1], batched[0]) > 1e-4 and rel(batched[2], batched[0]) > 1e-4  # the members differ


@pytest.mark.slow
def test_sweep_with_a_step_buffer_that_is_not_whole_chunks():
    """A step buffer (``max_steps``) that is not a whole number of 16-step chunks: paper
    ball over [0, 8], whose recording takes 31 steps (20 accepted, so the last chunk holds
    steps 16-19), with ``max_steps=31``: the sweep reads that chunk's own steps, not a
    16-step slice that XLA would shift back to fit the 31-entry buffer (starting at 15:
    every step's times one off). Gradient equal to the one with the default buffer
    (4096) to 1e-14 (measured bit-identical); the shifted slice gives 1.0 relative."""
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    x0 = jnp.asarray(PAPER_BALL_X0)

    def gc1(x, max_steps):
        return rb.final_gc(ball, ctl, x, (0.0, 8.0), rtol=TOL, atol=TOL, max_steps=max_steps)[0]

    big = jax.jit(jax.grad(lambda x: gc1(x, 4096)))(x0)
    small = jax.jit(jax.grad(lambda x: gc1(x, 31)))(x0)
    assert rel(small, big) < 1e-14


@pytest.mark.slow
def test_stored_stage_inputs_are_the_steps_own_and_give_the_recomputed_sweep():
    """The recording pass keeps the stage inputs of its first ``store_chunks`` chunks
    (``record.stage_inputs``; the sweep reads them instead of recomputing them from the
    chunk's start state). Paper ball over [0, 20] (50 accepted steps, chunks of 16) with
    two chunks stored, so the sweep mixes stored and recomputed chunks. (a) Every stored
    row equals the stage input ``Y_i = x_n + h Σ_j A_ij f(t_j, Y_j)`` of that accepted
    step, rebuilt here in plain Python from the recorded step times and chunk states
    (measured ≤ 4.7e-16 relative to max |Y|; bound 1e-12: rounding over at most 16 steps; a
    row of the wrong step or stage is O(h|f|) ~ 1e-2 off); a store of another shape is
    refused. (b) The steps are those of the
    solve without the store. (c) The sweep with the store equals the sweep with every
    chunk recomputed (measured 1.5e-15 relative; bound 1e-12), and it does read the store:
    stored inputs scaled by 1.001 move its result by 2.2e-3 (measured; bound > 1e-6)."""
    import dataclasses

    import diffrax as dfx

    from rollball_jax import _discrete_adjoint as discrete_adjoint, _rk
    from rollball_jax._reverse_sweep import reverse_sweep

    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    vf, params = discrete_adjoint.model_field(ball, ctl)
    x0 = jnp.asarray(PAPER_BALL_X0)
    tab = _rk.Tableau.from_solver(dfx.Dopri8())
    chunk, L = discrete_adjoint.CHUNK, 2

    def record(store):
        return jax.jit(lambda: _rk.adaptive_solve(
            tab, lambda t, y: vf(params, t, y), 0.0, 20.0, x0, rtol=TOL, atol=TOL, jump_ts=ctl.kink_times,
            max_steps=4096, save_ts=jnp.array([0.0, 20.0]), chunk=chunk, store_chunks=store,
            probe_v0=jnp.asarray(discrete_adjoint._probe_direction(15)), probe="bound")[0])()

    rec, plain = record(L), record(0)
    n_acc = int(rec.num_accepted)
    assert n_acc > (L + 1) * chunk and plain.stage_inputs is None and rec.stage_inputs.shape == (L, chunk, 13, 15)
    np.testing.assert_array_equal(np.asarray(rec.t_end[:n_acc]), np.asarray(plain.t_end[:n_acc]))  # (b)
    S, A, C = _rk.stage_matrices(tab)
    stored = np.asarray(rec.stage_inputs)
    jf = jax.jit(lambda t, y: vf(params, t, y))
    f = lambda t, y: np.asarray(jf(t, y))  # the field compiled, the step arithmetic in NumPy
    t_start, t_end, chunk_states = (np.asarray(a) for a in (rec.t_start, rec.t_end, rec.chunk_states))
    scale = np.max(np.abs(stored))
    for c in range(L):
        x = chunk_states[c]
        for k in range(chunk):
            n = c * chunk + k
            ta, tb = t_start[n], t_end[n]
            h = tb - ta
            Ks, Ys = [], []
            for i in range(S):
                y = x + sum(A[i, j] * Ks[j] for j in range(i))
                Ys.append(y)
                Ks.append(h * f(tb if C[i] == 1.0 else ta + C[i] * h, y))
            assert np.max(np.abs(np.stack(Ys[:13]) - stored[c, k])) < 1e-12 * scale, (c, k)
            x = x + sum(float(b) * K for b, K in zip(tab.b_sol, Ks))
    assert rel(x, chunk_states[L]) < 1e-12  # the rebuilt steps end where the record's did
    ct = jnp.asarray(np.random.default_rng(20261207).standard_normal((2, 15)))
    sweep = jax.jit(lambda r: reverse_sweep(tab, vf, params, r, ct, chunk))
    with_store, recomputed = sweep(rec), sweep(dataclasses.replace(rec, stage_inputs=None))  # (c)
    corrupted = sweep(dataclasses.replace(rec, stage_inputs=rec.stage_inputs * 1.001))
    flat = [jax.flatten_util.ravel_pytree(g)[0] for g in (with_store, recomputed, corrupted)]
    assert flat[0].shape == (75,) and rel(flat[0], flat[1]) < 1e-12
    assert rel(flat[2], flat[1]) > 1e-6
    # a store of another shape (here half a chunk) is refused while tracing, not misread
    with pytest.raises(ValueError, match=r"record.stage_inputs has shape \(2, 8, 13, 15\), expected \(L, 16, 13, 15\)"):
        reverse_sweep(tab, vf, params, dataclasses.replace(rec, stage_inputs=rec.stage_inputs[:, :8]), ct, chunk)


@pytest.mark.slow
def test_dense_sweep_equals_forward_mode():
    """Dense saves (31 save times over [0, 3], several per step: the solve takes 9): the
    sweep's transpose of the interpolant on each containing step (start state, end state,
    all 14 stages) vs the forward-mode contraction over all 75 parameters. Measured
    1.8e-15 relative; bound 1e-12. Dropping the interpolant's start-state, end-state or
    stage term gives 1.04, 0.31 and 0.36 relative."""
    traj, params = _problem(dense=True, ts=jnp.linspace(0.0, 3.0, 31))
    rng = np.random.default_rng(20261205)
    c = jnp.asarray(rng.standard_normal((31, 15)))
    rev = jax.jit(lambda p: jax.vjp(traj, p)[1](c)[0])(params)
    fwd = jax.tree.map(lambda j: jnp.tensordot(c, j, axes=2), jax.jit(jax.jacfwd(traj))(params))
    assert rel(jax.flatten_util.ravel_pytree(rev)[0], jax.flatten_util.ravel_pytree(fwd)[0]) < 1e-12


def test_reverse_pass_is_the_sweep():
    """The reverse pass is the sweep (the ``custom_jvp`` function ``_sweep``), not JAX's
    transpose of the replay: both give the same numbers (tests above), so only the program
    tells them apart. Step stops and dense saves alike. The gradient's program holds no
    hijax primitive (``call_hi_primitive``): ``jax.jit`` dispatches such a program through
    its C++ cache, one held would re-lower it on every call (~1 ms, measured in
    docs/derivatives.md)."""
    for dense in (False, True):
        traj, params = _problem(dense=dense)
        jaxpr = str(jax.make_jaxpr(jax.grad(lambda p: jnp.sum(traj(p))))(params))
        assert "name=_sweep" in jaxpr
        assert "call_hi_primitive" not in jaxpr
        assert "call_hi_primitive" in str(jax.make_jaxpr(traj)(params))  # the check can fail


@pytest.mark.slow
def test_linearize_and_its_transpose():
    """``jax.linearize`` (which optimisers such as optimistix's BFGS use) goes through the
    primitives' ``lin``/``linearized`` rules: the linear map equals ``jax.jvp``, its
    ``jax.linear_transpose`` equals ``jax.vjp`` (the sweep), and linearising the gradient
    equals the Hessian-vector product by ``jax.jvp``. A disk with one mass driven by the
    paper's ramp (kinks at 0.1 and 0.2) keeps the nested compiles small (the rules do
    not depend on the model; the paper ball took twice as long, measured 0, 1.3e-16, 0).
    Measured 0, 3.5e-16 and 0 relative; bounds 1e-12."""
    disk, ctl = rb.Disk(1.0, 1.0, 1.0, masses=[1.0], rails=[rb.CircleRail(0.9)]), rb.PaperStep.ball(1)

    def f(x):
        return rb.final_gc(disk, ctl, x, (0.0, 3.0), rtol=TOL, atol=TOL)

    x0 = jnp.asarray(disk.initial_state(theta=[-1.0]))
    v = jnp.asarray(np.random.default_rng(20261206).standard_normal(x0.shape[0]))
    ct = jnp.array([1.0, -2.0, 0.5])

    # Under jax.jit (the same rules; one compile per program instead of one per operation
    # of an eager run: 50 -> 43 s of CPU for this test, measured 2026-12-05).
    @jax.jit
    def first_order(x0, v, ct):
        _, lin = jax.linearize(f, x0)
        return lin(v), jax.jvp(f, (x0,), (v,))[1], jax.linear_transpose(lin, x0)(ct)[0], jax.vjp(f, x0)[1](ct)[0]

    # none of these programs holds the replay primitive (each is dispatched by jax.jit's cache)
    assert "call_hi_primitive" not in str(jax.make_jaxpr(first_order)(x0, v, ct))
    lin_v, jvp_v, lin_t_ct, vjp_ct = first_order(x0, v, ct)
    assert rel(lin_v, jvp_v) < 1e-12
    assert rel(lin_t_ct, vjp_ct) < 1e-12
    grad = jax.grad(lambda z: f(z)[0])

    @jax.jit
    def second_order(x0, v):
        _, lin_grad = jax.linearize(grad, x0)
        return lin_grad(v), jax.jvp(grad, (x0,), (v,))[1]

    lin_grad_v, hvp = second_order(x0, v)
    assert rel(lin_grad_v, hvp) < 1e-12


@pytest.mark.parametrize("solver_name", ["Tsit5", "Heun"])
@pytest.mark.parametrize("dense", [False, True])
def test_sweep_for_other_solvers_and_a_failed_solve(solver_name, dense):
    """A small non-linear pendulum field through ``discrete_adjoint.solve``: the sweep vs
    forward mode with Tsit5 (FSAL, 6 of 7 stages replayed) and Heun (no FSAL, no
    interpolant of its own order), step stops and dense saves, every parameter leaf
    (one of them unused: zero cotangent). Measured ≤ 4.2e-15 (Heun, 977 steps); bound 1e-13. A solve that
    runs out of ``max_steps`` with ``throw=False`` returns inf and a NaN gradient (every
    parameter and the initial state: it was zero before, silently)."""
    import diffrax as dfx

    from rollball_jax import _discrete_adjoint as discrete_adjoint

    def vf(p, t, y):
        return jnp.stack([p["a"] * y[1], -p["b"] * jnp.sin(y[0]) + p["c"][0] * y[1] ** 3 + 0.0 * p["unused"][0]])

    p = {"a": jnp.asarray(1.0), "b": jnp.asarray(2.0), "c": jnp.array([0.1]), "unused": jnp.array([1.0, 2.0])}
    x0 = jnp.array([0.3, 0.1])
    ts = jnp.array([0.0, 0.5, 1.0, 2.0])
    solver = getattr(dfx, solver_name)()
    c = jnp.asarray(np.random.default_rng(20261207).standard_normal((4, 2)))

    # Heun (order 2) at 1e-9 needs 30,873 steps, past max_steps: under jax.jit both modes
    # once differentiated that truncated solve silently (now they raise); at 1e-6, 978.
    tol = 1e-9 if solver_name == "Tsit5" else 1e-6

    def f(p, x, max_steps=4096, throw=True):
        return jnp.sum(c * discrete_adjoint.solve(vf, p, x, ts, solver=solver, rtol=tol, atol=tol, dense=dense,
                                                  max_steps=max_steps, throw=throw))

    rev = jax.jit(jax.grad(f, argnums=(0, 1)))(p, x0)
    fwd = jax.jit(jax.jacfwd(f, argnums=(0, 1)))(p, x0)
    r, fw = jax.flatten_util.ravel_pytree(rev)[0], jax.flatten_util.ravel_pytree(fwd)[0]
    assert rel(r, fw) < 1e-13
    assert float(jnp.max(jnp.abs(rev[0]["unused"]))) == 0.0
    short = lambda p, x: f(p, x, max_steps=3, throw=False)
    assert not np.isfinite(float(jax.jit(short)(p, x0)))
    g = jax.jit(jax.grad(short, argnums=(0, 1)))(p, x0)
    assert np.all(np.isnan(np.asarray(jax.flatten_util.ravel_pytree(g)[0])))
