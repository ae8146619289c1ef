"""Implicit solvers fed with the exact Jacobian agree with the explicit Dopri8 solution.

Both paper examples over [0, 20], compared at the reference times with the explicit diffrax
``Dopri8`` solution (ball at the paper's 1e-10, disk at 1e-12, as in test_ball/test_disk)
and with the reference states (error ~1e-12). Criterion: ≤ 1e-7 absolute, states are O(1–5).

- diffrax ``Kvaerno5`` (ESDIRK 5(4)) at rtol = atol = 1e-10: its Newton (VeryChord) matrix
  I − γh ∂f/∂x is built by ``jax.linearize`` of our vector field (exact Jacobian); observed
  ~4e-9 (ball), ~9e-9 (disk) from the reference.
- SciPy ``Radau`` (radau5's method) at 1e-10 with the exact Jacobian: ~3e-11 / ~5e-11.
- SciPy ``BDF`` needs 1e-12: its global error is ~1e3 × tol here (orders ≤ 5 with local
  error control over ~2000 steps): at 1e-10 the ball ends 1.6e-7 from the reference (fails
  1e-7), at 1e-12 3.5e-9; disk 1.6e-8 / 5.6e-10. Runtime is ~0.3 s either way.
"""

import diffrax as dfx
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from conftest import PAPER_BALL_X0, make_paper_ball, make_paper_disk
from rollball_jax import jacobians as jj
from rollball_jax.scipy_bridge import numpy_functions, solve_with_scipy

pytest.importorskip("scipy")

EXAMPLES = {
    "ball": (make_paper_ball, lambda: rb.PaperStep.ball(3), 1e-10),
    "disk": (make_paper_disk, lambda: rb.PaperStep.disk(4), 1e-12),
}


@pytest.fixture(scope="module")
def explicit(reference):
    """Reference times, reference states and the explicit Dopri8 solution of both examples."""
    out = {}
    for name, (make_model, make_ctl, tol) in EXAMPLES.items():
        ref = reference[name]
        ts = np.asarray(ref["t_out"])
        sol = rb.simulate(make_model(), make_ctl(), ref["x0"], (0.0, 20.0), ts=ts, rtol=tol, atol=tol)
        expected = np.array([ref["states"][k] for k in ref["states"]])
        assert np.abs(sol.xs - expected).max() <= 1e-8
        out[name] = (ts, expected, sol.xs, np.asarray(ref["x0"]))
    return out


@pytest.mark.parametrize("name", [pytest.param("ball", marks=pytest.mark.slow), "disk"])
def test_kvaerno5_matches_dopri8(name, explicit):
    ts, expected, dopri8, x0 = explicit[name]
    make_model, make_ctl, _ = EXAMPLES[name]
    sol = rb.simulate(make_model(), make_ctl(), x0, (0.0, 20.0), ts=ts, solver=dfx.Kvaerno5(), rtol=1e-10, atol=1e-10)
    assert np.abs(sol.xs - dopri8).max() <= 1e-7
    assert np.abs(sol.xs - expected).max() <= 1e-7


@pytest.mark.parametrize("name, method, tol", [
    ("ball", "Radau", 1e-10), ("disk", "Radau", 1e-10), ("ball", "BDF", 1e-12), ("disk", "BDF", 1e-12),
])
def test_scipy_implicit_with_exact_jacobian(name, method, tol, explicit):
    ts, expected, dopri8, x0 = explicit[name]
    make_model, make_ctl, _ = EXAMPLES[name]
    res = solve_with_scipy(make_model(), make_ctl(), x0, (0.0, 20.0), ts, method=method, rtol=tol, atol=tol)
    np.testing.assert_array_equal(res.ts, ts)
    assert res.njev > 0 and res.segments == 3  # Jacobian used; restarted at the kinks 0.1, 0.2
    assert np.abs(res.xs - dopri8).max() <= 1e-7
    assert np.abs(res.xs - expected).max() <= 1e-7


def test_numpy_functions_match_jax():
    model, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    fun, jac = numpy_functions(model, ctl)
    x = np.linspace(0.1, 1.5, 15)
    f = fun(0.05, x)
    assert isinstance(f, np.ndarray) and f.shape == (15,)
    # compiled vs eager evaluation: equal up to rounding (XLA fuses differently)
    np.testing.assert_allclose(f, np.asarray(model.vector_field(jnp.asarray(0.05), jnp.asarray(x), ctl)), rtol=1e-14, atol=1e-14)
    j = jac(0.05, x)
    assert j.shape == (15, 15)
    np.testing.assert_allclose(j, jj.state_jacobian(model, ctl, 0.05, x), rtol=1e-13, atol=1e-13)


def test_steps_output_and_explicit_method():
    # t_eval=None returns every step, the junctions at the kinks once; explicit methods get no Jacobian.
    model, ctl = make_paper_disk(), rb.PaperStep.disk(4)
    x0 = np.array([-np.pi / 2] * 4 + [0.0] * 6)
    res = solve_with_scipy(model, ctl, x0, (0.0, 1.0), method="DOP853", rtol=1e-10, atol=1e-10)
    assert np.all(np.diff(res.ts) > 0) and res.ts[0] == 0.0 and res.ts[-1] == 1.0
    assert {0.1, 0.2} <= set(res.ts.tolist()) and res.njev == 0
    direct = solve_with_scipy(model, ctl, x0, (0.0, 1.0), [1.0], method="DOP853", rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(direct.xs[0], res.xs[-1], rtol=0, atol=1e-13)


def test_scipy_failure_raises_simulation_error(unchecked_types):
    model = make_paper_disk()
    bad = rb.FunctionControl(lambda t, p: jnp.where(t > 0.05, jnp.nan, 1.0) * jnp.ones(4))
    x0 = np.array([-np.pi / 2] * 4 + [0.0] * 6)
    with pytest.raises(rb.SimulationError) as info:
        solve_with_scipy(model, bad, x0, (0.0, 1.0), method="RK45", rtol=1e-8, atol=1e-8)
    assert 0.0 < info.value.t_reached <= 0.1
    with pytest.raises(rb.ModelError, match="'x0' must have length 10"):
        solve_with_scipy(model, rb.PaperStep.disk(4), x0[:-1], (0.0, 1.0))
    # the model's own state rules, as rb.simulate (a versor of length 2 was integrated
    # with a non-orthogonal Λ, silently; found by a fresh-user trial)
    ball = make_paper_ball()
    xq = PAPER_BALL_X0.copy()
    xq[6:10] = [2.0, 0.0, 0.0, 0.0]
    with pytest.raises(rb.ModelError, match=r"the versor q = .* has \|q\| = 2; it must have unit length"):
        solve_with_scipy(ball, rb.PaperStep.ball(3), xq, (0.0, 1.0), method="DOP853")
    with pytest.raises(rb.ModelError, match=r"'x0' must be a state vector of length 15; got shape \(3, 5\)"):
        solve_with_scipy(ball, rb.PaperStep.ball(3), PAPER_BALL_X0.reshape(3, 5), (0.0, 1.0))
