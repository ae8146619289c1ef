"""Contact force from the total momentum balance (rollball_jax.contact, issue 5 item 2).

Two routes compute the CM acceleration: closed-form rigid-body kinematics with Ω̇ from the
vector field (used by contact_force) and nested jvp of cm_spatial along the flow (generic).

Identities tested:
* the two routes agree at random states of a ball (spline control, external force) and
  of a disk (1e-12 relative: both exact, rounding only);
* disk with CM = GC and one mass on a circle: F_c = (−f_s, 0, N) with f_s and N of the
  Newtonian balance (5.44), z̈_1 from (5.43) and φ̈ from the Newtonian (5.46) — an
  independent route (no variational vector field). Tolerance 1e-10: both sides are
  closed-form expressions evaluated in float64 (observed ~1e-15).
* ball at rest with the CM above the GC (an equilibrium): F_c = M g e3 exactly.
* ball in the planar configuration of sec. 5.4: same contact force as the disk.
* ball along a trajectory (spline control): M z̈_cm from the nested jvp equals central differences of
  cm_spatial(x(t)) of a 1e-12 solve (h = 1e-3: truncation ~h² ≈ 1e-6·|z⁽⁴⁾|, noise ~1e-12/h²).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import rollball_jax as rb
from rollball_jax.contact import cm_acceleration, cm_acceleration_jvp, contact_along, contact_force, total_mass
from conftest import PAPER_BALL_X0, make_paper_ball, make_paper_disk, recorded_compiles

_contact = eqx.filter_jit(contact_force)


def _newton_disk(m0, m1, r, r1, d2, g, fe, x, u):
    """f_s and N of (5.44) for the disk of sec. 5.4 (CM = GC, one mass on a circle of radius r1)."""
    th, thd, phi, phid = x
    al, ald = phi + th, phid + thd
    phidd = -(r * fe[0] + m1 * r1 * (np.cos(al) * (r * ald**2 + g) + (r1 + r * np.sin(al)) * u)) / (
        d2 + (m0 + m1) * r**2 + m1 * r1 * (r1 + 2 * r * np.sin(al))
    )  # (5.46)
    aldd = phidd + u
    z11_dd = -r * phidd - r1 * (np.cos(al) * ald**2 + np.sin(al) * aldd)  # (5.43), z̈ = −r φ̈
    z13_dd = r1 * (-np.sin(al) * ald**2 + np.cos(al) * aldd)
    f_s = m0 * r * phidd + fe[0] - m1 * z11_dd
    normal = -fe[2] + (m0 + m1) * g + m1 * z13_dd
    return f_s, normal


_jvp_route = eqx.filter_jit(
    lambda model, ctl, t, x: total_mass(model) * (cm_acceleration_jvp(model, ctl, t, x) + jnp.array([0.0, 0.0, model.g]))
    - model.force(t)
)


def test_disk_contact_force_equals_newtonian_5_44():
    rng = np.random.default_rng(13)
    f = _contact
    worst = worst_jvp = 0.0
    for _ in range(25):
        m0, m1, r, d2, g = rng.uniform(0.5, 2.0, size=5)
        r1 = rng.uniform(0.1, 0.95) * r
        fe = np.array([rng.normal(), 0.0, rng.normal()])
        u = rng.normal()
        x = rng.normal(size=4) * np.array([3.0, 1.0, 3.0, 1.0])
        disk = rb.Disk(m0, r, d2, (0.0, 0.0), g, [m1], [rb.CircleRail(r1)], force=rb.ConstantForce(fe))
        fc = np.asarray(f(disk, rb.ConstantControl([u]), 0.3, jnp.asarray(x)))
        f_s, normal = _newton_disk(m0, m1, r, r1, d2, g, fe, x, u)
        scale = max(1.0, abs(normal), abs(f_s))
        assert abs(fc[1]) <= 1e-12 * scale
        err = max(abs(fc[2] - normal), abs(-fc[0] - f_s)) / scale  # friction is −f_s e1 (5.44)
        worst = max(worst, err)
        fj = np.asarray(_jvp_route(disk, rb.ConstantControl([u]), 0.3, jnp.asarray(x)))
        worst_jvp = max(worst_jvp, max(abs(fj[2] - normal), abs(-fj[0] - f_s)) / scale)
    assert worst <= 1e-10, worst
    assert worst_jvp <= 1e-10, worst_jvp


def test_closed_form_cm_acceleration_equals_jvp_route():
    rng = np.random.default_rng(11)
    ball = make_paper_ball()
    ball = rb.Ball(ball.m0, ball.radius, ball.inertia, ball.chi0, ball.g, ball.masses, ball.rails,
                   force=rb.ConstantForce([0.2, -0.1, 0.3]))
    ctl = rb.CubicSplineControl(jnp.linspace(0.0, 3.0, 4), rng.normal(size=(3, 4)))
    closed = eqx.filter_jit(jax.vmap(cm_acceleration, in_axes=(None, None, 0, 0)))
    generic = eqx.filter_jit(jax.vmap(cm_acceleration_jvp, in_axes=(None, None, 0, 0)))
    ts = jnp.asarray(rng.uniform(0.0, 3.0, size=20))
    q = rng.normal(size=(20, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    xs = np.concatenate([rng.normal(size=(20, 6)) * 2.0, q, rng.normal(size=(20, 5))], axis=1)
    a, b = np.asarray(closed(ball, ctl, ts, jnp.asarray(xs))), np.asarray(generic(ball, ctl, ts, jnp.asarray(xs)))
    assert np.max(np.abs(a - b)) <= 1e-12 * max(1.0, np.abs(b).max())
    disk = make_paper_disk()
    ctl4 = rb.CubicSplineControl(jnp.linspace(0.0, 3.0, 4), rng.normal(size=(4, 4)))
    xd = jnp.asarray(rng.normal(size=(20, 10)) * 2.0)
    a, b = np.asarray(closed(disk, ctl4, ts, xd)), np.asarray(generic(disk, ctl4, ts, xd))
    assert np.max(np.abs(a - b)) <= 1e-12 * max(1.0, np.abs(b).max())
    np.testing.assert_array_equal(a[:, 1], 0.0)  # the disk moves in the e1–e3 plane
    # a ball without point masses (Chaplygin's ball, CM off the GC, external force)
    bare = rb.Ball(1.3, 1.0, [0.8, 1.0, 1.2], [0.05, -0.1, -0.2], 1.0, force=rb.ConstantForce([0.2, -0.1, 0.3]))
    q = rng.normal(size=(20, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    xb = jnp.asarray(np.concatenate([q, rng.normal(size=(20, 5))], axis=1))
    ctl0 = rb.ConstantControl(jnp.zeros((0,)))
    a, b = np.asarray(closed(bare, ctl0, ts, xb)), np.asarray(generic(bare, ctl0, ts, xb))
    assert np.max(np.abs(a - b)) <= 1e-12 * max(1.0, np.abs(b).max()) and np.abs(b).max() > 0.1


def test_ball_at_rest_with_cm_above_gc_has_weight_as_normal_force():
    ball = make_paper_ball()
    x0 = jnp.asarray(PAPER_BALL_X0)
    # PAPER_BALL_X0 rounds the angles; the exact equilibrium angles solve the balance condition
    x_eq = x0.at[1:3].set(jnp.array([2.0368847, 0.7044245]))
    fc = np.asarray(_contact(ball, rb.ConstantControl(jnp.zeros(3)), 0.0, x_eq))
    mg = float(total_mass(ball) * ball.g)
    np.testing.assert_allclose(fc, [0.0, 0.0, mg], atol=1e-5 * mg)  # angles exact to ~1e-7
    # exactly at rest with the CM exactly above the GC (one mass, χ0 = 0): F_c = M g e3
    one = rb.Ball(1.3, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, 0.0], 2.0, [0.7], [rb.CircleRail(0.6)])
    x = one.initial_state(theta=[np.pi / 2])
    fc = np.asarray(_contact(one, rb.ConstantControl([0.0]), 0.0, x))
    np.testing.assert_allclose(fc, [0.0, 0.0, 2.0 * 2.0], atol=1e-14)
    # no friction needed at rest, and the friction ratio stays differentiable there (design costs
    # use it): |F_t| is smoothed by a tiny constant instead of being sqrt(0) with an infinite slope
    from rollball_jax.contact import ContactForces

    weight = jnp.array([0.0, 0.0, 4.0])  # exactly no tangential force
    rest = ContactForces(ts=jnp.zeros(1), force=weight[None])
    assert 0.0 <= float(rest.friction_ratio[0]) < 1e-100 and float(rest.normal[0]) == 4.0
    slope = jax.grad(lambda f: ContactForces(ts=jnp.zeros(1), force=f[None]).friction_ratio[0])(weight)
    assert np.all(np.isfinite(np.asarray(slope)))


def test_planar_ball_contact_equals_disk():
    rng = np.random.default_rng(12)
    rails = [rb.CircleRail(0.8), rb.EllipseRail(0.4, 0.6, center=[0.1, 0.0, -0.05])]
    chi0 = [0.02, 0.0, -0.1]
    force = rb.ConstantForce([0.3, 0.0, -0.2])
    ball = rb.Ball(1.2, 1.0, [0.7, 0.9, 0.6], chi0, 1.0, [0.8, 0.6], rails, force=force)
    disk = rb.Disk(1.2, 1.0, 0.9, (chi0[0], chi0[2]), 1.0, [0.8, 0.6], rails, force=force)
    ctl = rb.ConstantControl([0.7, -1.3])
    f = _contact
    for _ in range(10):
        xd = rng.normal(size=6)
        th, thd, phi, phid = xd[:2], xd[2:4], xd[4], xd[5]
        q = np.array([np.cos(-phi / 2), 0.0, np.sin(-phi / 2), 0.0])  # Λ(q) = (5.29)
        xb = np.concatenate([th, thd, q, [0.0, -phid, 0.0], [0.0, 0.0]])
        np.testing.assert_allclose(f(ball, ctl, 0.0, jnp.asarray(xb)), f(disk, ctl, 0.0, jnp.asarray(xd)), atol=1e-12)


def test_ball_cm_acceleration_matches_finite_differences_along_trajectory():
    ball = make_paper_ball()
    ctl = rb.CubicSplineControl(jnp.linspace(0.0, 3.0, 4), 0.4 * jnp.array([[1.0, -0.5, 0.2, 0.0], [0.0, 0.4, -0.3, 0.2], [0.5, 0.0, 0.3, -0.2]]))
    x0 = jnp.asarray(PAPER_BALL_X0).at[10:13].set([0.1, -0.2, 0.05])
    h = 1e-3
    centres = np.array([0.5, 1.3, 2.2])
    ts = np.sort(np.concatenate([centres - h, centres, centres + h]))
    sol = rb.simulate(ball, ctl, x0, (0.0, 3.0), ts=ts, rtol=1e-12, atol=1e-12)
    cm = sol.cm_spatial.reshape(3, 3, 3)  # (centre, -h/0/+h, xyz)
    fd = (cm[:, 2] - 2 * cm[:, 1] + cm[:, 0]) / h**2
    acc = eqx.filter_jit(jax.vmap(lambda t, x: cm_acceleration(ball, ctl, t, x)))(jnp.asarray(centres), jnp.asarray(sol.xs[1::3]))
    np.testing.assert_allclose(np.asarray(acc), fd, atol=1e-5 * max(1.0, np.abs(fd).max()))
    # the public route: simulate + contact forces (same compiled solve)
    cf = contact_along(ball, ctl, x0, (0.0, 3.0), ts=ts, rtol=1e-12, atol=1e-12)
    mass = float(total_mass(ball))
    np.testing.assert_allclose(np.asarray(cf.force[1::3]), mass * fd + np.array([0.0, 0.0, mass]), atol=1e-4)
    # the derived observables, by value from the finite-difference route: N = M (g + z̈_3),
    # F_t = M (z̈_1, z̈_2), |F_t| / N (paper ball: no external force)
    expect = mass * fd + np.array([0.0, 0.0, mass])
    np.testing.assert_allclose(np.asarray(cf.normal[1::3]), expect[:, 2], atol=1e-4)
    np.testing.assert_allclose(np.asarray(cf.tangential[1::3]), expect[:, :2], atol=1e-4)
    ratio = np.hypot(expect[:, 0], expect[:, 1]) / expect[:, 2]
    np.testing.assert_allclose(np.asarray(cf.friction_ratio[1::3]), ratio, rtol=1e-4)
    full = np.asarray(cf.force)
    np.testing.assert_allclose(np.asarray(cf.friction_ratio), np.hypot(full[:, 0], full[:, 1]) / full[:, 2], rtol=1e-12)
    s = cf.summary()
    assert s["min_normal"] == np.min(full[:, 2]) > 0
    assert s["max_friction_ratio"] == np.max(np.asarray(cf.friction_ratio)) and np.isfinite(s["max_friction_ratio"])
    np.testing.assert_allclose(s["max_tangential"], np.max(np.hypot(full[:, 0], full[:, 1])), rtol=1e-12)


def test_contact_forces_called_directly_compile_once():
    """``rb.contact_forces`` outside a trace is one compiled program per structure: the same
    numbers as ``contact_along`` (which shares it), and a second trajectory (new times,
    states, NumPy or JAX) compiles nothing. It used to run op by op (~40 ms a call for the
    paper ball at 201 times; ~0.4 ms compiled)."""
    ball, ctl = make_paper_ball(), rb.PaperStep.ball(3)
    ts = np.linspace(0.0, 2.0, 21)
    sol = rb.simulate(ball, ctl, PAPER_BALL_X0, (0.0, 2.0), ts=ts)
    direct = rb.contact_forces(ball, ctl, sol.ts, sol.xs, sol.context)
    along = contact_along(ball, ctl, PAPER_BALL_X0, (0.0, 2.0), ts=ts)
    np.testing.assert_array_equal(np.asarray(direct.force), np.asarray(along.force))
    other = rb.simulate(ball, ctl, PAPER_BALL_X0, (0.0, 3.0), ts=np.linspace(0.0, 3.0, 21))
    ts_j, xs_j = jnp.asarray(other.ts), jnp.asarray(other.xs)
    with recorded_compiles() as compiles:
        rb.contact_forces(ball, ctl, other.ts, other.xs, other.context)
        rb.contact_forces(ball, ctl, ts_j, xs_j, other.context)
    assert compiles == [], compiles
