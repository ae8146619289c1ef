"""Rails: closed-form ζ′, ζ″ against autodiff and finite differences; grouping; validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from conftest import recorded_compiles
from rollball_jax.errors import ModelError

ROT = np.asarray(rb.geometry.paper_rail_rotation(jnp.array([0.4, 0.3, 1.0])))

RAILS = {
    "circle": rb.CircleRail([0.5, 0.7], rotation=ROT, center=[0.1, 0.0, -0.05]),
    "circle_paper": rb.CircleRail.paper([0.95, 0.9], [[0, 0, 1], [np.pi / 4, np.pi / 4, 1]]),
    "ellipse": rb.EllipseRail(0.6, 0.3, rotation=ROT),
    "figure_eight": rb.FigureEightRail([0.6, 0.4], [0.5, 0.2]),
    "spoke": rb.SpokeRail([1.0, 2.0, -0.5], limits=[-0.6, 0.6], center=[0.0, 0.1, 0.0]),
}


@pytest.mark.parametrize("name", sorted(RAILS))
def test_closed_form_derivatives_match_autodiff(name):
    rng = np.random.default_rng(101)
    rail = RAILS[name]
    theta = jnp.asarray(rng.uniform(-4, 4, size=rail.size))
    closed = rail.derivatives(theta)
    auto = rail.derivatives_autodiff(theta)
    for c, a in zip(closed, auto):
        np.testing.assert_allclose(c, a, rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", sorted(RAILS))
def test_derivatives_match_central_differences(name):
    rng = np.random.default_rng(102)
    # central differences: truncation O(h²ζ‴) ~ 1e-10 and rounding O(eps/h) ~ 1e-11 at h = 1e-5
    rail = RAILS[name]
    theta = rng.uniform(-4, 4, size=rail.size)
    h = 1e-5
    z = lambda th: np.asarray(rail.zeta(jnp.asarray(th)))
    _, d1, d2 = rail.derivatives(jnp.asarray(theta))
    np.testing.assert_allclose(d1, (z(theta + h) - z(theta - h)) / (2 * h), atol=1e-9)
    np.testing.assert_allclose(d2, (z(theta + h) - 2 * z(theta) + z(theta - h)) / h**2, atol=2e-5)


def test_circle_paper_convention_matches_notes():
    # verified convention: ζ(θ) = r (cos θ n − sin θ b1(n))
    v = np.array([np.pi / 4, np.pi / 4, 1.0])
    n = np.asarray(rb.geometry.spherical_to_cartesian(v))
    b1, _ = rb.geometry.frisvad_basis(n)
    rail = rb.CircleRail.paper(0.85, v)
    th = 0.7044
    np.testing.assert_allclose(rail.zeta(jnp.array([th]))[0], 0.85 * (np.cos(th) * n - np.sin(th) * np.asarray(b1)), atol=1e-15)


def test_function_rail_uses_autodiff():
    def helix_like(theta, p):
        return p["a"] * jnp.array([jnp.cos(theta), jnp.sin(theta) * jnp.cos(theta), 0.3 * jnp.sin(theta)])

    rail = rb.FunctionRail(helix_like, {"a": 0.5})
    th = 0.9
    z, d1, d2 = (np.asarray(v[0]) for v in rail.derivatives(jnp.array([th])))
    a = 0.5
    np.testing.assert_allclose(d1, a * np.array([-np.sin(th), np.cos(2 * th), 0.3 * np.cos(th)]), atol=1e-15)
    np.testing.assert_allclose(d2, a * np.array([-np.cos(th), -2 * np.sin(2 * th), -0.3 * np.sin(th)]), atol=1e-15)


def test_railset_keeps_mass_order_across_kinds():
    a = rb.CircleRail(0.5)
    b = rb.SpokeRail([0, 0, 1.0], [-0.5, 0.5])
    c = rb.CircleRail(0.3, center=[0.0, 0.0, 0.1])
    rs = rb.RailSet([a, b, c])
    assert rs.size == 3 and len(rs.groups) == 2
    theta = jnp.array([0.3, 0.2, -1.1])
    expect = np.stack([a.zeta(theta[:1])[0], b.zeta(theta[1:2])[0], c.zeta(theta[2:])[0]])
    np.testing.assert_allclose(rs.positions(theta), expect, atol=1e-15)
    zeta, d1, _ = rs.evaluate(theta)
    np.testing.assert_allclose(zeta, expect, atol=1e-15)
    np.testing.assert_allclose(d1[1], [0, 0, 1.0])
    (masses, limits), = rs.bounded()  # the spoke is the only rail with ends
    assert list(masses) == [1] and limits.tolist() == [[-0.5, 0.5]]
    assert a.periodic and c.periodic and not b.periodic and b.theta_limits().tolist() == [[-0.5, 0.5]]
    assert a.theta_limits() is None
    # every closed rail kind is periodic (the feedback wraps its angles), a spoke is not
    assert rb.EllipseRail(0.3, 0.2).periodic and rb.FigureEightRail(0.3, 0.2).periodic


def test_rail_validation_errors():
    for radius in (-0.1, 0.0):  # zero is refused too: a point, not a rail
        with pytest.raises(ModelError, match=r"rail 'radius' must be positive; got \[-?0\.[01]\]"):
            rb.CircleRail(radius)
    with pytest.raises(ModelError, match="rail parameter 'radius' contains non-finite values"):
        rb.CircleRail(np.nan)
    with pytest.raises(ModelError, match=r"rails\[1\] is not a rail \(got str\)"):
        rb.RailSet([rb.CircleRail(0.5), "circle"])
    with pytest.raises(ModelError, match="rotation"):
        rb.CircleRail(0.5, rotation=np.diag([1.0, 1.0, -1.0]))
    with pytest.raises(ModelError, match="limits"):
        rb.SpokeRail([1.0, 0, 0], [0.5, -0.5])
    with pytest.raises(ModelError, match="rows"):
        rb.EllipseRail([0.1, 0.2], [0.1, 0.2, 0.3])
    # too few, too many and a column of three: only shape (3,) is a point (a "< (3,)" check
    # would let the last two through)
    for fn in (lambda th, p: jnp.array([th, th]), lambda th, p: jnp.array([th, th, th, th]),
               lambda th, p: jnp.array([[th], [th], [th]])):
        with pytest.raises(ModelError, match=r"FunctionRail fn must return shape \(3,\), got"):
            rb.FunctionRail(fn)
    with pytest.raises(ModelError, match="'radius' must be numeric"):
        rb.CircleRail("0.5")


# ---- values against independent formulas (each test names the wrong code it catches) ----

def _rot(rng):
    q, r = np.linalg.qr(rng.standard_normal((3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def test_rail_points_match_hand_written_formulas():
    # A spoke's direction is normalised (ζ = c + θ d/|d|, θ = arc length): a direction
    # multiplied by |d| instead, or an ellipse/figure-eight with a, b swapped, fails here.
    rng = np.random.default_rng(103)
    R, c = _rot(rng), rng.uniform(-0.1, 0.1, 3)
    th = rng.uniform(-4, 4)
    e1, e3 = R[:, 0], R[:, 2]
    cases = [
        (rb.CircleRail(0.5, rotation=R, center=c), c + 0.5 * (np.cos(th) * e1 + np.sin(th) * e3)),
        (rb.EllipseRail(0.6, 0.3, rotation=R, center=c), c + 0.6 * np.cos(th) * e1 + 0.3 * np.sin(th) * e3),
        (rb.FigureEightRail(0.6, 0.4, rotation=R, center=c),
         c + 0.6 * np.cos(th) * e1 + 0.4 * np.sin(th) * np.cos(th) * e3),
        (rb.SpokeRail([1.0, 2.0, -2.0], [-0.5, 0.5], center=c), c + th * np.array([1.0, 2.0, -2.0]) / 3.0),
    ]
    for rail, expect in cases:
        np.testing.assert_allclose(rail.zeta(jnp.array([th]))[0], expect, rtol=0, atol=1e-15)


def test_one_row_broadcasts_against_k_rows_of_any_parameter():
    # Every parameter may carry the leading axis k alone; the others broadcast. Wrong
    # trailing ranks in the row count (e.g. a rotation counted as rank 1 or 3) either
    # refuse these or give the wrong k.
    rng = np.random.default_rng(104)
    R2 = np.stack([_rot(rng), _rot(rng)])
    c2 = rng.uniform(-0.1, 0.1, (2, 3))
    th = jnp.array([0.3, -1.2])
    rails = [
        rb.CircleRail([0.5, 0.6]), rb.CircleRail(0.5, rotation=R2), rb.CircleRail(0.5, center=c2),
        rb.EllipseRail([0.5, 0.6], 0.3), rb.EllipseRail(0.5, [0.3, 0.2]), rb.EllipseRail(0.5, 0.3, rotation=R2),
        rb.EllipseRail(0.5, 0.3, center=c2), rb.FigureEightRail(0.5, 0.3, rotation=R2),
        rb.SpokeRail([[1.0, 0, 0], [0, 1.0, 0]], [-0.5, 0.5]), rb.SpokeRail([1.0, 0, 0], [[-0.5, 0.5], [-0.2, 0.4]]),
        rb.SpokeRail([1.0, 0, 0], [-0.5, 0.5], center=c2),
    ]
    for rail in rails:
        assert rail.size == 2, rail
        assert rail.zeta(th).shape == (2, 3)
    np.testing.assert_allclose(rails[1].zeta(th)[1], 0.5 * (np.cos(-1.2) * R2[1][:, 0] + np.sin(-1.2) * R2[1][:, 2]), atol=1e-15)
    np.testing.assert_allclose(rails[2].zeta(th)[1], c2[1] + 0.5 * np.array([np.cos(-1.2), 0, np.sin(-1.2)]), atol=1e-15)
    # ... and one row of everything is one mass, whatever the trailing shapes.
    for rail in (rb.CircleRail(0.5, rotation=R2[0], center=c2[0]), rb.EllipseRail(0.5, 0.3, rotation=R2[0], center=c2[0]),
                 rb.SpokeRail([1.0, 0, 0], [-0.5, 0.5], center=c2[0]), rb.FunctionRail(lambda t, p: jnp.array([t, 0.0, 0.0]), {})):
        assert rail.size == 1, rail


def test_sample_spans_the_theta_range():
    # Closed rails are sampled over one period [0, 2π], ends included; a spoke between its
    # limits; a FunctionRail over its `period`.
    circle = rb.CircleRail(0.5).sample(5)[0]
    th = np.linspace(0, 2 * np.pi, 5)
    np.testing.assert_allclose(circle, 0.5 * np.stack([np.cos(th), 0 * th, np.sin(th)], -1), atol=1e-15)
    spoke = rb.SpokeRail([0.0, 3.0, 4.0], [-0.5, 0.25], center=[0.1, 0, 0]).sample(4)[0]
    s = np.linspace(-0.5, 0.25, 4)
    np.testing.assert_allclose(spoke, np.array([0.1, 0, 0]) + s[:, None] * np.array([0, 0.6, 0.8]), atol=1e-15)
    fr = rb.FunctionRail(lambda t, p: jnp.array([t, 0.0, 0.0]), period=(0.5, 1.5))
    np.testing.assert_allclose(fr.sample(3)[0][:, 0], [0.5, 1.0, 1.5], atol=1e-15)
    default = rb.FunctionRail(lambda t, p: jnp.array([t, 0.0, 0.0]))
    assert default.theta_range() == (0.0, 2 * np.pi)


def test_max_distance_closed_forms():
    # Circle with centre c in its plane: |c| + ρ; ellipse: max(a, b); figure-eight
    # (a > b/√2 here): a at θ = 0; spoke: the farther end (|ζ| is convex in θ).
    R = _rot(np.random.default_rng(105))
    c = 0.1 * R[:, 0] + 0.05 * R[:, 2]
    np.testing.assert_allclose(rb.CircleRail(0.5, rotation=R, center=c).max_distance(), [np.hypot(0.1, 0.05) + 0.5], rtol=1e-12)
    np.testing.assert_allclose(rb.EllipseRail([0.6, 0.2], [0.3, 0.7], rotation=R).max_distance(), [0.6, 0.7], rtol=1e-12)
    np.testing.assert_allclose(rb.FigureEightRail(0.6, 0.5).max_distance(), [0.6], rtol=1e-12)
    # (the far end is the second of the first spoke and the first of the second one: a
    # maximum over the wrong axis mixes the rows)
    spoke = rb.SpokeRail([[1.0, 0, 0], [0, 0, 2.0]], [[-0.2, 0.5], [-0.9, 0.1]], center=[[0, 0.3, 0], [0, 0, 0.1]])
    np.testing.assert_allclose(spoke.max_distance(), [np.hypot(0.5, 0.3), 0.8], rtol=1e-12)


@pytest.mark.parametrize("lo, at", [(0.0, 3000.5), (1.0, 3000.5), (0.0, 0.3)])
def test_max_distance_refines_the_true_peak_between_samples(lo, at):
    # Bumps of |ζ|: three broad ones of height 1 centred on samples and a narrow one of
    # height 1.05 centred half-way between samples, whose best samples (0.985) are lower
    # than each broad bump's highest sample (1.0). The narrow bump is the fourth highest
    # sampled local maximum and must be one of the (up to 4) refined ones: selecting peaks by
    # one neighbour only, refining the highest samples instead of the highest peaks, or
    # fewer than four peaks, returns ~1.0 instead of 1.05. On a θ-range starting at lo = 1
    # the sample spacing is still (hi − lo)/4096 (hi + lo refines 1.5 rad away); a narrow
    # peak 0.3 samples after lo (sampled at 1.026) is found from the first sample only (its
    # left neighbour counts as −∞; the second sample is lower, so not a local maximum).
    num = 4097
    h = 2 * np.pi / (num - 1)
    broad, c2 = np.array([400, 1000, 1600]) * h, at * h
    s1, s2 = 40 * h, h

    def fn(t, p):
        r = (0.5 + 0.5 * jnp.sum(jnp.exp(-0.5 * ((t - lo - broad) / s1) ** 2))
             + 0.55 * jnp.exp(-0.5 * ((t - lo - c2) / s2) ** 2))
        return jnp.array([r, 0.0, 0.0])

    rail = rb.FunctionRail(fn, period=(lo, lo + 2 * np.pi))
    samples = np.linalg.norm(rail.sample()[0], axis=-1)
    true_max = 0.5 + 0.55 + 0.5 * np.sum(np.exp(-0.5 * ((c2 - broad) / s1) ** 2))
    assert samples.max() < true_max - 0.02  # the samples alone miss the true maximum
    if at > 1:
        assert samples.max() < 1.0 + 1e-12  # ... and the narrow bump's are below the broad ones'
    np.testing.assert_allclose(rail.max_distance(), [true_max], rtol=1e-12)


def test_rail_parameter_shapes_types_and_traced_values():
    """Found by mutation testing (each check kills mutants of ``_rows``, ``_count`` or
    ``_paper_rotations``): the trailing shape must match exactly, a (1, 2) and a (1, 4)
    centre are refused (a ``<`` or ``>`` tuple comparison passes one of them); booleans
    count as numbers (0/1), as in the package's other checks, objects do not; a rail built
    inside ``jax.jit`` (traced parameters, shaped with ``jnp``) gives the points of the same
    rail built outside; a rotation missing its (3, 3) tail is named as a bad shape; the paper
    frames are the same bits under ``jit`` as outside."""
    for c in ([[0.0, 0.0]], [[0.0, 0.0, 0.0, 0.0]]):
        with pytest.raises(ModelError, match=r"'center' must have shape \(3,\) or"):
            rb.CircleRail(0.5, center=c)
    flags = rb.CircleRail(0.5, center=np.array([True, False, False]))
    np.testing.assert_array_equal(np.asarray(flags.center), [[1.0, 0.0, 0.0]])
    with pytest.raises(ModelError, match="'center' must be numeric"):
        rb.CircleRail(0.5, center=[0.0, None, 0.0])
    th = jnp.array([0.7, -1.2])
    r, c = jnp.array([0.5, 0.3]), jnp.array([0.1, -0.2, 0.05])
    inside = jax.jit(lambda r, c: rb.CircleRail(r, center=c).derivatives(th))(r, c)
    outside = rb.CircleRail(r, center=c).derivatives(th)
    for u, v in zip(inside, outside):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=0, atol=1e-15)
    # a rotation without its trailing (3, 3) is named as such, not counted as rows (a
    # mismatch with the radii would then be reported instead)
    with pytest.raises(ModelError, match=r"'rotation' must have shape \(3, 3\)"):
        rb.CircleRail([0.5, 0.6], rotation=np.eye(3)[0])
    # the paper frames are compiled, so a rail built under jit has bit-identical frames
    # (op by op they differ by up to ~5e-11 near n_z = -1, where 1/(1 + n_z) amplifies rounding)
    gen = np.random.default_rng(11)
    v = gen.standard_normal((20, 3))
    v[:10, 2] = -20.0 * np.abs(v[:10, 2])
    jitted = jax.jit(jax.vmap(lambda vi: rb.CircleRail.paper(0.5, vi).rotation[0]))(jnp.asarray(v))
    np.testing.assert_array_equal(np.asarray(jitted), np.asarray(rb.CircleRail.paper(np.full(20, 0.5), v).rotation))


def test_abstract_rail_cannot_be_built():
    with pytest.raises(TypeError, match="abstract"):
        rb.rails.AbstractRail()


def test_rail_parameter_errors_name_the_problem():
    with pytest.raises(ModelError, match="non-finite"):
        rb.CircleRail(0.5, center=[np.nan, 0.0, 0.0])
    with pytest.raises(ModelError, match="non-finite"):
        rb.FunctionRail(lambda t, p: p * jnp.array([jnp.cos(t), 0.0, jnp.sin(t)]), np.inf)
    with pytest.raises(ModelError, match="inconsistent numbers of rows"):
        rb.CircleRail([0.1, 0.2], rotation=None, center=np.zeros((3, 3)))
    with pytest.raises(ModelError, match="rotation"):  # orthogonal columns but not unit: not a rotation
        rb.CircleRail(0.5, rotation=1.1 * np.eye(3))
    with pytest.raises(ModelError, match="non-zero"):
        rb.SpokeRail([0.0, 0.0, 0.0], [-0.5, 0.5])
    for cls in (rb.EllipseRail, rb.FigureEightRail):  # semi-axes / lobe sizes: positive, zero refused
        for a, b, bad in ((0.0, 0.3, "'a'"), (0.4, -0.1, "'b'"), ([0.4, 0.5], [0.3, 0.0], "'b'")):
            with pytest.raises(ModelError, match=bad):
                cls(a, b)
    with pytest.raises(ModelError, match="limits"):  # empty tube
        rb.SpokeRail([1.0, 0.0, 0.0], [0.3, 0.3])


@pytest.mark.parametrize("rails", [[], [rb.EllipseRail(0.5, 0.3)]], ids=["none", "one"])
def test_railset_of_zero_or_one_mass(rails):
    # The size-0 branches return empty arrays of the right shapes; one mass takes the
    # general path (a branch taken for size 1 would return nothing).
    rs = rb.RailSet(rails)
    n = len(rails)
    assert rs.size == n
    th = jnp.full((n,), 0.4)
    z, d1, d2 = rs.evaluate(th)
    assert z.shape == d1.shape == d2.shape == (n, 3)
    assert rs.positions(th).shape == (n, 3)
    assert rs.max_distance().shape == (n,)
    assert rs.sample(7).shape == (n, 7, 3)
    if n:
        np.testing.assert_allclose(z[0], [0.5 * np.cos(0.4), 0.0, 0.3 * np.sin(0.4)], atol=1e-15)
        np.testing.assert_allclose(d2[0], -z[0], atol=1e-15)
        np.testing.assert_allclose(rs.max_distance(), [0.5], rtol=1e-12)
        np.testing.assert_allclose(rs.sample(5)[0, 1], [0.0, 0.0, 0.3], atol=1e-15)


def test_building_a_model_compiles_no_eager_operations():
    """Construction shapes concrete arrays in NumPy and moves them with ``jax.device_put``:
    building a ball of a new size compiles only the package's own jitted helpers (the paper
    rail frames, the rail reach samples and their peak refinement: 3, plus at most a scalar
    conversion), not one program per eager ``jnp`` operation and shape (measured 4 with a
    7-mass ball; 60-odd before, which made building the first paper ball take 0.5 s)."""
    import jax

    with recorded_compiles() as compiled:
        rails = [rb.CircleRail.paper(0.5 + 0.05 * i, [0.1 * i, 0.2, 1.0]) for i in range(7)]
        ball = rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, -0.05], 1.0, [1.0] * 7, rails)
        x0 = ball.initial_state(theta=np.linspace(0.0, 1.0, 7))
    assert len(compiled) <= 6, compiled
    assert isinstance(x0, jax.Array) and isinstance(ball.masses, jax.Array) and x0.dtype == np.float64


def test_batched_function_rail_has_one_row_of_params_per_mass():
    """``FunctionRail(batched=True)``: parameters with a leading axis give one rail per row, each
    evaluated with its own row (here circles of radius r_i about centres c_i in the x–y
    plane, by hand; the centres are (k, 3), so "one row per mass" is the leading axis, not
    the last), and a model takes one mass per row. (Only the refusals of bad batched input
    were tested before.)"""
    def circle(th, p):
        return p["c"] + p["r"] * jnp.array([jnp.cos(th), jnp.sin(th), 0.0])

    radii = np.array([0.3, 0.5])
    centres = np.array([[0.1, 0.0, 0.0], [0.0, -0.2, 0.1]])
    rail = rb.FunctionRail(circle, {"r": radii, "c": centres}, batched=True)
    assert rail.size == 2
    theta = np.array([0.4, -1.2])
    expect = centres + radii[:, None] * np.stack([np.cos(theta), np.sin(theta), np.zeros(2)], axis=-1)
    np.testing.assert_allclose(rail.zeta(theta), expect, rtol=0, atol=1e-15)
    ball = rb.Ball(1.0, 1.0, [1.0, 1.0, 1.0], masses=[0.1, 0.2], rails=[rail])
    np.testing.assert_allclose(ball.rails.positions(jnp.asarray(theta)), expect, rtol=0, atol=1e-15)
