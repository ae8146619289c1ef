"""Bad input raises the documented error; no NaN reaches the user silently."""

import jax.numpy as jnp
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax.errors import ModelError, SimulationError
from conftest import PAPER_BALL_X0, make_paper_ball


def _ball(**kw):
    args = dict(m0=1.0, radius=1.0, inertia=[0.9, 1.0, 1.1], chi0=[0, 0, -0.05], g=1.0, masses=[1.0],
                rails=[rb.CircleRail(0.5)])
    args.update(kw)
    return rb.Ball(**args)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(m0=0.0), "m0"),
        (dict(m0=-1.0), "m0"),
        (dict(radius=0.0), "radius"),
        (dict(inertia=[0.9, -1.0, 1.1]), "inertia"),
        (dict(inertia=[0.1, 0.2, 1.0]), "triangle"),
        (dict(inertia=[1.0, 1.0]), "shape"),
        (dict(masses=[0.0]), "masses"),
        (dict(masses=[1.0, 2.0]), "one rail per point mass"),
        (dict(chi0=[0.0, 0.0, 1.0]), "chi0"),
        (dict(chi0=[0.0, 0.0]), "chi0"),
        (dict(rails=[rb.CircleRail(1.0)]), "rail of mass 1"),
        (dict(rails=[rb.CircleRail(0.6, center=[0.0, 0.0, 0.5])]), "rail of mass 1"),
        (dict(rails=[rb.SpokeRail([1.0, 0, 0], [-1.2, 0.5])]), "rail of mass 1"),
        (dict(rails=[rb.EllipseRail(0.5, 1.01)]), "rail of mass 1"),
        (dict(m0=np.nan), "m0"),
    ],
)
def test_ball_construction_errors(kw, match):
    with pytest.raises(ModelError, match=match):
        _ball(**kw)


def test_disk_construction_errors():
    with pytest.raises(ModelError, match="d2"):
        rb.Disk(1.0, 1.0, 0.0)
    with pytest.raises(ModelError, match="chi0"):
        rb.Disk(1.0, 1.0, 1.0, chi0=[0.0, 0.1, 0.0])


def test_initial_state_errors():
    ball = _ball()
    with pytest.raises(ModelError, match="unit length"):
        ball.initial_state(q=[1.0, 0.1, 0.0, 0.0])
    with pytest.raises(ModelError, match="theta"):
        ball.initial_state(theta=[0.0, 1.0])


def test_simulate_argument_errors():
    ball = make_paper_ball()
    ctl = rb.PaperStep.ball(3)
    with pytest.raises(ModelError, match="'x0' must have length 15"):
        rb.simulate(ball, ctl, PAPER_BALL_X0[:-1], (0, 1))
    bad = PAPER_BALL_X0.copy()
    bad[0] = np.nan
    with pytest.raises(ModelError, match="non-finite"):
        rb.simulate(ball, ctl, bad, (0, 1))
    with pytest.raises(ModelError, match="t0 < t1"):
        rb.simulate(ball, ctl, PAPER_BALL_X0, (1, 0))
    with pytest.raises(ModelError, match="2 masses|shape"):
        rb.simulate(ball, rb.ConstantControl([0.0, 0.0]), PAPER_BALL_X0, (0, 1))


def test_solver_out_of_steps_names_time_and_cause():
    ball = make_paper_ball()
    with pytest.raises(SimulationError, match=r"solve failed at t = .*max_steps") as info:
        rb.simulate(ball, rb.PaperStep.ball(3), PAPER_BALL_X0, (0, 20), max_steps=10)
    assert 0 < info.value.t_reached < 20
    assert "max_steps" in info.value.cause


def test_blow_up_raises_instead_of_nan():
    # u grows like e^{60 t}: the state overflows; the user gets an error, never NaN data.
    ball = make_paper_ball()
    ctl = rb.FunctionControl(lambda t, p: jnp.ones(3) * jnp.exp(60.0 * t))
    with pytest.raises(SimulationError, match="solve failed|non-finite"):
        rb.simulate(ball, ctl, PAPER_BALL_X0, (0, 20), max_steps=2000)


def test_mass_leaving_spoke_raises():
    """θ = t²/2 (u = 1) passes the spoke's end 0.5 at t = 1: the error names the first save
    time at or after it (θ(1) rounds to just above 0.5 on [0, 2]; saves every 0.005 there
    and 0.0075 over [0, 3]), also when the
    solve runs on until the mass reaches the shell (t = √2) and stops there: that stop
    used to be reported as the spoke's (at t = 1.581, a save time past the shell; found
    by a fresh-user trial)."""
    ball = _ball(rails=[rb.SpokeRail([1.0, 0.0, 0.0], [-0.5, 0.5])])
    x0 = ball.initial_state(theta=[0.0])
    for span, t_first in (((0.0, 1.3), 1.0 + 0.0013), ((0.0, 2.0), 1.005), ((0.0, 3.0), 1.005)):
        with pytest.raises(SimulationError, match="left the end of its rail") as info:
            rb.simulate(ball, rb.ConstantControl([1.0]), x0, span, rtol=1e-8, atol=1e-8)
        assert 1.0 - 1e-9 <= info.value.t_reached <= t_first + 1e-9, (span, info.value.t_reached)
