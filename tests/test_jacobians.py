"""Exact Jacobians ∂f/∂x, ∂f/∂p of (7.2)/(6.2): forward mode vs complex step vs differences.

Tolerances:
- forward mode vs complex step (h = 1e-30) and vs reverse mode: all three are exact up to
  rounding (complex step: truncation O(h²) = 1e-60 relative, no cancellation), so they
  differ only by rounding in f's evaluation, amplified by the 3×3 solve of (7.4) (condition
  number ~10 for these models) and ~100 operations: normwise ≤ 1e-12 ≈ 4500 eps.
- central differences with step h_j = 1e-5 · max(1, |x_j|): truncation h²|f‴|/6 ≈ 2e-11|f‴|,
  rounding ≈ eps|f|/h ≈ 2e-11|f| — the optimum h ~ (3 eps)^{1/3} ≈ 1e-5 for O(1) scales. Both
  terms are far below 1e-6 relative unless third derivatives are ~1e4 times larger than f's
  scale; observed ≈ 1e-10.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from conftest import PAPER_BALL_X0, PAPER_DISK_X0, make_paper_ball, make_paper_disk, recorded_compiles
from rollball_jax import jacobians as jj

#: Only for the parametrised cases, drawn once at import (no test draws from it).
_CASES_RNG = np.random.default_rng(11)


def _mixed_ball():
    rails = [
        rb.CircleRail.paper(0.8, [0.3, 0.4, 1.0]),
        rb.EllipseRail(0.5, 0.3, center=[0.1, 0.1, 0.0]),
        rb.SpokeRail([0.3, -0.2, 1.0], [-0.6, 0.6]),
        rb.FigureEightRail(0.5, 0.4, center=[0.0, 0.1, 0.0]),
        rb.FunctionRail(lambda th, p: p["a"] * jnp.stack([jnp.cos(th), 0.3 * jnp.sin(2 * th), jnp.sin(th)]), {"a": 0.5}),
    ]
    return rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0.03, -0.02, -0.1], 1.3, [0.7, 1.1, 0.4, 0.5, 0.6], rails,
                   force=rb.ConstantForce([0.3, -0.4, 0.2]))


def _ball_state(model, rng=_CASES_RNG):
    n = model.n
    q = rng.normal(size=4)
    return np.concatenate([rng.uniform(-0.5, 0.5, n), rng.normal(size=n), q / np.linalg.norm(q),
                           rng.normal(size=3), rng.normal(size=2)])


def _disk_state(model, rng=_CASES_RNG):
    return np.concatenate([rng.uniform(-3, 3, model.n), rng.normal(size=model.n), rng.uniform(-3, 3, 1), rng.normal(size=1)])


def _cases():
    ball = make_paper_ball()
    mixed = _mixed_ball()
    disk = make_paper_disk()
    ell_disk = rb.Disk(1.2, 1.0, 0.8, (0.02, -0.1), 1.0, [0.8, 0.6],
                       [rb.CircleRail(0.7), rb.EllipseRail(0.4, 0.6, center=[0.1, 0.0, -0.05])],
                       force=rb.ConstantForce([0.3, 0.0, 0.0]))
    spline = rb.CubicSplineControl([0.0, 1.0, 2.0, 3.0], _CASES_RNG.normal(size=(5, 4)))
    return [
        ("paper ball", ball, rb.PaperStep.ball(3), [np.asarray(PAPER_BALL_X0)] + [_ball_state(ball) for _ in range(3)]),
        ("mixed-rail ball", mixed, spline, [_ball_state(mixed) for _ in range(3)]),
        ("paper disk", disk, rb.PaperStep.disk(4), [np.asarray(PAPER_DISK_X0)] + [_disk_state(disk) for _ in range(3)]),
        ("ellipse disk", ell_disk, rb.ConstantControl([0.7, -1.3]), [_disk_state(ell_disk) for _ in range(2)]),
    ]


CASES = _cases()
IDS = [c[0] for c in CASES]


def _rel(a, b):
    return np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b))


def _central_state_jacobian(model, ctl, t, x, rel_h=1e-5):
    cols = []
    for j in range(x.shape[0]):
        h = rel_h * max(1.0, abs(x[j]))
        e = np.zeros_like(x)
        e[j] = h
        fp = np.asarray(jj.vector_field(model, ctl, t, x + e))
        fm = np.asarray(jj.vector_field(model, ctl, t, x - e))
        cols.append((fp - fm) / (2 * h))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("name, model, ctl, states", CASES, ids=IDS)
def test_state_jacobian_autodiff_vs_complex_step(name, model, ctl, states):
    for t, x in zip([0.05, 0.15, 0.7, 2.5], states):
        j_fwd = np.asarray(jj.state_jacobian(model, ctl, t, x))
        assert j_fwd.shape == (model.state_size, model.state_size)
        j_cs = np.asarray(jj.complex_step_jacobian(model, ctl, t, x))
        assert _rel(j_fwd, j_cs) <= 1e-12, (name, _rel(j_fwd, j_cs))


def test_reverse_mode_equals_forward_mode():
    _, model, ctl, states = CASES[1]
    j_fwd = np.asarray(jj.state_jacobian(model, ctl, 0.3, states[0]))
    j_rev = np.asarray(jj.state_jacobian_rev(model, ctl, 0.3, states[0]))
    assert _rel(j_rev, j_fwd) <= 1e-12


@pytest.mark.parametrize("name, model, ctl, states", CASES, ids=IDS)
def test_state_jacobian_vs_central_differences(name, model, ctl, states):
    t, x = 0.15, states[-1]
    j_fwd = np.asarray(jj.state_jacobian(model, ctl, t, x))
    j_fd = _central_state_jacobian(model, ctl, t, x)
    assert _rel(j_fd, j_fwd) <= 1e-6, (name, _rel(j_fd, j_fwd))


def _fd_param(model, ctl, t, x, where, h):
    """Central difference of f along every entry of the leaf ``where((model, ctl))``."""
    p = np.asarray(where((model, ctl)), dtype=float)
    out = np.zeros((x.shape[0], *p.shape))
    for idx in np.ndindex(p.shape):
        hh = h * max(1.0, abs(p[idx]))
        f = []
        for s in (1, -1):
            pp = p.copy()
            pp[idx] += s * hh
            m, c = eqx.tree_at(where, (model, ctl), jnp.asarray(pp))
            f.append(np.asarray(jj.vector_field(m, c, t, x)))
        out[(slice(None), *idx)] = (f[0] - f[1]) / (2 * hh)
    return out


PARAMETERS = [
    ("m0", lambda mc: mc[0].m0, lambda d: d[0].m0),
    ("radius", lambda mc: mc[0].radius, lambda d: d[0].radius),
    ("inertia", lambda mc: mc[0].inertia, lambda d: d[0].inertia),
    ("chi0", lambda mc: mc[0].chi0, lambda d: d[0].chi0),
    ("masses", lambda mc: mc[0].masses, lambda d: d[0].masses),
    ("g", lambda mc: mc[0].g, lambda d: d[0].g),
    ("rail radius", lambda mc: mc[0].rails.groups[0].radius, lambda d: d[0].rails.groups[0].radius),
    ("ellipse a", lambda mc: mc[0].rails.groups[1].a, lambda d: d[0].rails.groups[1].a),
    ("force", lambda mc: mc[0].force.value, lambda d: d[0].force.value),
    ("spline values", lambda mc: mc[1].values, lambda d: d[1].values),
]


def test_parameter_jacobian_vs_central_differences_and_complex_step():
    # ∂f/∂p for every array leaf at once, checked leaf by leaf; same step-size argument as for ∂f/∂x.
    model, ctl, states = CASES[1][1], CASES[1][2], CASES[1][3]
    t, x = 0.7, states[0]
    full = jj.parameter_jacobian(model, ctl, t, x)
    for name, where, pick in PARAMETERS:
        d = np.asarray(pick(full))
        leaf = where((model, ctl))
        assert d.shape == (model.state_size, *leaf.shape), name
        fd = _fd_param(model, ctl, t, x, where, 1e-5)
        scale = max(np.linalg.norm(d), 1e-300)
        assert np.linalg.norm(fd - d) <= 1e-6 * scale + 1e-9, (name, np.linalg.norm(fd - d) / scale)
    for name, where, pick in (PARAMETERS[2], PARAMETERS[-1]):
        cs = np.asarray(jj.complex_step_parameter_jacobian(model, ctl, t, x, where))
        np.testing.assert_allclose(cs, pick(full), rtol=0, atol=1e-12 * np.abs(cs).max(), err_msg=name)


def test_parameter_jacobian_paper_disk_and_control():
    model, ctl = make_paper_disk(), rb.PaperStep.disk(4)
    x = CASES[2][3][1]
    where = lambda mc: (mc[0].d2, mc[0].rails.groups[0].radius, mc[1].amplitude)  # noqa: E731
    d_d2, d_rad, d_amp = jj.parameter_jacobian_where(model, ctl, 0.05, x, where)
    assert d_d2.shape == (10,) and d_rad.shape == (10, 4) and d_amp.shape == (10,)
    for k, (w, d) in enumerate([(lambda mc: mc[0].d2, d_d2), (lambda mc: mc[0].rails.groups[0].radius, d_rad),
                                (lambda mc: mc[1].amplitude, d_amp)]):
        fd = _fd_param(model, ctl, 0.05, x, w, 1e-5)
        assert np.linalg.norm(fd - d) <= 1e-6 * np.linalg.norm(d), k
    # θ̈ = u = amplitude · signs at t < t_a: ∂(θ̇-dot)/∂amplitude = signs exactly
    np.testing.assert_array_equal(np.asarray(d_amp)[4:8], np.asarray(ctl.signs))


def test_filter_spec_selects_parameters():
    model, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    spec = jax.tree_util.tree_map(lambda _: False, (model, ctl))
    spec = eqx.tree_at(lambda s: (s[0].m0, s[1].amplitude), spec, replace=(True, True))
    d_model, d_ctl = jj.parameter_jacobian(model, ctl, 0.05, PAPER_BALL_X0, filter_spec=spec)
    assert d_model.m0.shape == (15,) and d_ctl.amplitude.shape == (15,)
    assert d_model.radius is None and d_ctl.signs is None
    fd = _fd_param(model, ctl, 0.05, PAPER_BALL_X0, lambda mc: mc[0].m0, 1e-5)
    assert np.linalg.norm(fd - d_model.m0) <= 1e-6 * np.linalg.norm(d_model.m0)


def test_no_recompilation_for_new_values():
    """New parameter values, times and states (Python floats, NumPy or JAX arrays) reuse the
    compiled Jacobian; a new structure (a new static leaf) compiles once."""
    model, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    jj.state_jacobian(model, ctl, 0.0, PAPER_BALL_X0)
    other = eqx.tree_at(lambda m: m.m0, model, jnp.asarray(1.7, dtype=jnp.float64))
    ctl2 = rb.PaperStep.ball(3, amplitude=2.0)
    calls = [(other, ctl2, t, PAPER_BALL_X0 + t) for t in (0.3, 1.0, 7.0)]
    calls += [(other, ctl, jnp.asarray(t), jnp.asarray(PAPER_BALL_X0 + t)) for t in (0.3, 1.0)]  # weak t
    fresh = rb.FunctionControl(lambda t, p: jnp.full(3, 0.1) * t)
    with recorded_compiles() as compiles:
        for args in calls:
            jj.state_jacobian(*args)
    assert compiles == [], compiles
    with recorded_compiles() as compiles:
        jj.state_jacobian(model, fresh, 0.0, PAPER_BALL_X0)
    assert len(compiles) == 1, compiles


def test_bad_state_raises():
    model, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    with pytest.raises(rb.ModelError):
        jj.state_jacobian(model, ctl, 0.0, PAPER_BALL_X0[:-1])
    with pytest.raises(rb.ModelError):
        jj.complex_step_jacobian(model, ctl, [0.0, 1.0], PAPER_BALL_X0)
