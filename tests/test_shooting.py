"""Multiple shooting: defects and their Jacobians, and a design from an unstable state that
single shooting does not finish in the same budget."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax import design as dz
from conftest import recorded_compiles


def _inverted_disk(horizon, n_samples=81, tol=1e-8):
    """Disk with a 2-unit mass on a rail of radius 0.9, mass straight above the centre:
    an inverted pendulum, linearised growth rate 0.454 (time constant 2.2)."""
    disk = rb.Disk(1.0, 1.0, 0.5, masses=[2.0], rails=[rb.CircleRail(0.9)])
    x0 = np.array(disk.initial_state(theta=[np.pi / 2]))
    prob = dz.DesignProblem(disk, x0, horizon=horizon, n_knots=int(horizon) + 1, n_samples=n_samples,
                            rtol=tol, atol=tol, max_steps=4096)
    return disk, x0, prob


@pytest.mark.slow
def test_segments_reproduce_single_shooting_and_defects_vanish():
    """With the nodes taken from one solve of the same controls, the stitched samples equal
    the single-shooting samples (to the solver's tolerance) and the defects are ~0."""
    gen = np.random.default_rng(7)
    _, _, prob = _inverted_disk(4.0, tol=1e-10)
    ms = dz.MultipleShooting(prob, 4)
    values = 0.05 * gen.standard_normal((1, prob.n_knots))
    params = ms.initial_params(values=values)  # nodes from rb.simulate of these controls
    ev_ms = ms.evaluate(params)
    ev_ss = prob.evaluate(prob.initial_params(values=values))
    keep = np.ones(ev_ms.xs.shape[0], bool)
    keep[np.asarray(ms.pairs) + 1] = False  # drop the duplicated boundary samples
    np.testing.assert_allclose(np.asarray(ev_ms.ts)[keep], np.asarray(ev_ss.ts), rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(ev_ms.xs)[keep], np.asarray(ev_ss.xs), rtol=0, atol=1e-8)
    assert float(jnp.max(jnp.abs(ms.defects(params)))) < 1e-8
    # an eager evaluation of new parameters of the same structure reuses the compiled segments
    params2 = ms.initial_params(values=0.5 * values)
    with recorded_compiles() as compiles:
        xs2 = np.asarray(ms.evaluate(params2).xs)
    assert not [n for n in compiles if any(k in n for k in ("scan", "segments", "trajectory", "map"))], compiles
    assert np.all(np.isfinite(xs2)) and not np.allclose(xs2, np.asarray(ev_ms.xs))
    with pytest.raises(rb.ModelError, match="multiple of n_segments"):
        dz.MultipleShooting(prob, 3)


@pytest.mark.slow
def test_defect_jacobian_matches_finite_differences():
    """∂defects/∂(knot values, nodes) by forward mode vs central differences (h = 1e-6):
    agreement ~1e-9 measured, bound 1e-6 of the Jacobian's scale."""
    gen = np.random.default_rng(8)
    _, _, prob = _inverted_disk(4.0, tol=1e-11)
    ms = dz.MultipleShooting(prob, 4)
    params = ms.initial_params(values=0.1 * gen.standard_normal((1, prob.n_knots)))
    params["nodes"] = params["nodes"] + 0.01 * gen.standard_normal(params["nodes"].shape)
    flat, unravel = ms.flatten(params)
    f = jax.jit(lambda v: ms.defects(unravel(v)).reshape(-1))
    J = np.asarray(jax.jit(jax.jacfwd(lambda v: ms.defects(unravel(v)).reshape(-1)))(flat))
    h = 1e-6
    cols = gen.choice(flat.shape[0], 8, replace=False)
    for k in cols:
        e = jnp.zeros_like(flat).at[k].set(h)
        fd = (np.asarray(f(flat + e)) - np.asarray(f(flat - e))) / (2 * h)
        np.testing.assert_allclose(J[:, k], fd, rtol=0, atol=1e-6 * max(1.0, np.max(np.abs(J))))
    # structure: d_s = x(τ_{s+1}; node_s) − node_{s+1} (node_0 = x0, not free), so
    # ∂d_s/∂nodes[s] = −I exactly, ∂d_s/∂nodes[s−1] = the segment's state transition
    # matrix, and d_s does not depend on any other node
    Jn = np.asarray(jax.jit(jax.jacfwd(lambda p: ms.defects(p)))(params)["nodes"])  # (S−1, N, S−1, N)
    S1, N = Jn.shape[0], Jn.shape[1]
    for s_ in range(S1):
        np.testing.assert_array_equal(Jn[s_, :, s_, :], -np.eye(N))
        for r_ in range(S1):
            if r_ not in (s_, s_ - 1):
                np.testing.assert_array_equal(Jn[s_, :, r_, :], 0.0)
        if s_ > 0:
            assert np.max(np.abs(Jn[s_, :, s_ - 1, :] - np.eye(N))) > 1e-3  # a real flow map, not I


@pytest.mark.slow
def test_multiple_shooting_finishes_a_design_single_shooting_does_not():
    """Inverted disk, move the GC to z = 2 and come to rest at T = 40 (growth e^{0.454·40}
    ≈ 8e7). Same cost, same Levenberg–Marquardt, 40 iterations each: single shooting stalls
    at cost 1.6e-3 (measured; asserted > 2e-4); multiple shooting with 8 segments reaches
    1.6e-6 (asserted < 2e-5) with continuity defects ≤ 8e-10 (asserted < 1e-6)."""
    _, _, prob = _inverted_disk(40.0)
    terms = (dz.TargetGC(2.0, 1e2), dz.FinalRest(1e2), dz.ControlEffort(1e-3))
    single = dz.optimize(prob, dz.Cost(*terms), method="lm", max_steps=40, progress=False)
    ms = dz.MultipleShooting(prob, 8)
    multiple = dz.optimize(ms, dz.Cost(*terms, ms.continuity(1e4)), method="lm", max_steps=40, progress=False)
    assert single.value > 2e-4
    assert multiple.value < 2e-5
    assert multiple.metrics["max_defect"] < 1e-6
    # The segments form one trajectory: re-simulated in one piece (rtol 1e-10) the designed
    # controls reach z = 2.0013 (measured): the ~1e-9 defects and solver errors grow by up
    # to e^{0.454·40} on this unstable motion (why the open-loop plan needs feedback).
    sol = rb.simulate(prob.model, ms.control(multiple.params), prob.x0, (0.0, 40.0), rtol=1e-10, atol=1e-10, n_save=5)
    assert abs(sol.gc[-1][0] - 2.0) < 2e-2
    # Closed loop: TVLQR (Q = I, R = 1) around the designed segments (ms.nominal) follows
    # them all along: max state deviation 5.7e-6, final |z − 2| 9.4e-8 (measured), where
    # the open-loop re-simulation drifts 1.3e-3 away.
    ts, xs = ms.nominal(multiple.params, per_segment=20)
    lqr = dz.tvlqr(prob.model, ms.control(multiple.params), prob.x0, (0.0, 40.0), nominal=(ts, xs))
    closed = rb.simulate(prob.model, lqr, prob.x0, (0.0, 40.0), ts=ts, rtol=1e-10, atol=1e-10)
    opened = rb.simulate(prob.model, ms.control(multiple.params), prob.x0, (0.0, 40.0), ts=ts, rtol=1e-10, atol=1e-10)
    dev_closed, dev_open = np.max(np.abs(closed.xs - xs)), np.max(np.abs(opened.xs - xs))
    assert dev_closed < 1e-4 and dev_open > 10 * dev_closed
    assert abs(closed.gc[-1][0] - 2.0) < 1e-5


def test_segment_count_is_checked(unchecked_types):
    """n_segments must be a positive integer dividing n_samples − 1 (2.5 was taken for 2,
    silently; found by a fresh-user trial); a bad node is named as its segment's start.
    Nothing is compiled (segment 0's solve is, ~1 s: its start is the valid x0)."""
    _, _, prob = _inverted_disk(4.0)  # n_samples − 1 = 80
    for bad in (2.5, 0, True, "2"):
        with pytest.raises(rb.ModelError, match="n_segments must be a positive integer"):
            dz.MultipleShooting(prob, bad)
    with pytest.raises(rb.ModelError, match="must be a multiple of n_segments = 3"):
        dz.MultipleShooting(prob, 3)
    ms = dz.MultipleShooting(prob, 4)
    assert ms.n_segments == 4 and dz.MultipleShooting(prob, np.array(4)).n_segments == 4
    with pytest.raises(rb.ModelError, match="'rtol' must be positive"):  # not blamed on a node
        ms.nominal(ms.initial_params(nodes=np.zeros((3, 4))), rtol=-1.0)
    # a non-finite node is named as the start of its segment (it was reported as "'x0'")
    params = ms.initial_params(nodes=np.full((3, 4), np.nan))
    with pytest.raises(rb.ModelError, match=r"'start of segment 1 \(t = 1\)' contains non-finite values"):
        ms.nominal(params)
