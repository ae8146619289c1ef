"""Solve outcomes as codes through diffrax's public API (``rollball_jax._results``)."""

from __future__ import annotations

import diffrax as dfx
import jax
import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax import _results
from rollball_jax.batch import STATUS_MAX_STEPS, STATUS_NAMES, STATUS_SUCCESS


def test_every_diffrax_outcome_maps_to_its_own_code():
    present = [n for n in _results.NAMES if hasattr(dfx.RESULTS, n)]
    assert {"successful", "max_steps_reached", "nonfinite", "event_occurred"} <= set(present)
    for name in present:
        assert int(_results.result_code(getattr(dfx.RESULTS, name))) == _results.CODES[name]
    assert _results.CODES["successful"] == STATUS_SUCCESS == 0
    assert STATUS_NAMES[STATUS_MAX_STEPS] == "max_steps_reached"
    assert _results.describe(_results.CODES["max_steps_reached"]).startswith("max_steps_reached: ")
    assert _results.name(_results.UNKNOWN) == "unknown"


def test_codes_of_a_batch_of_solves_and_the_error_message():
    """Under vmap each member gets its own code; a solve that runs out of steps says so."""
    disk = rb.Disk(1.0, 1.0, 1.0, (0.0, 0.0), 1.0, [1.0], [rb.CircleRail(0.5)])
    x0 = np.asarray(disk.initial_state(theta=[0.3], phi_dot=1.0))

    def code(t1, max_steps=3):
        sol = dfx.diffeqsolve(dfx.ODETerm(lambda t, y, a: disk.vector_field(t, y, rb.ConstantControl([0.0]))),
                              dfx.Dopri5(), 0.0, t1, 0.001, x0, max_steps=max_steps, throw=False,
                              stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-8))
        return _results.result_code(sol.result)

    assert int(code(5.0, 4096)) == _results.CODES["successful"]
    assert int(code(5.0)) == _results.CODES["max_steps_reached"]
    with pytest.raises(rb.SimulationError, match="max_steps_reached: the maximum number of solver steps"):
        rb.simulate(disk, rb.ConstantControl([0.0]), x0, (0.0, 5.0), max_steps=3)
    codes = jax.vmap(code)(np.array([0.002, 5.0]))  # 3 steps reach t1 = 0.002, not 5
    np.testing.assert_array_equal(np.asarray(codes), [0, _results.CODES["max_steps_reached"]])
