"""Config files → model/control/state (rollball_jax.app.config): shipped examples, formats, errors.

Errors must be ConfigError whose message starts with the full key path of the culprit.
"""

from __future__ import annotations

import copy
import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

import rollball_jax as rb
from rollball_jax.app.config import (
    DEFAULT_N_SAVE,
    SOLVERS,
    build_from_mapping,
    dump_toml,
    example_path,
    example_text,
    list_examples,
    load_config,
    make_solver,
)
from rollball_jax.errors import ConfigError

REFERENCE = Path(__file__).resolve().parent / "data" / "paper_examples.json"
REFERENCE_TIMES = [0.0, 0.1, 0.2, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0]


def _reference():
    if not REFERENCE.exists():
        pytest.skip(f"reference file {REFERENCE} not available")
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="module")
def ball_mapping():
    return tomllib.loads(example_text("paper-ball"))


@pytest.fixture(scope="module")
def disk_mapping():
    return tomllib.loads(example_text("paper-disk"))


def _mutated(mapping, edit):
    m = copy.deepcopy(mapping)
    edit(m)
    return m


# ---- shipped examples ----------------------------------------------------------------


def test_examples_are_listed_and_resolvable():
    assert {"paper-ball", "paper-disk"} <= set(list_examples())
    assert example_path("paper-ball.toml") == example_path("paper-ball")
    with pytest.raises(ConfigError, match="no shipped example named 'nope'"):
        example_path("nope")


def test_paper_disk_matches_section_6():
    ref = _reference()["disk"]
    cfg = load_config("paper-disk")
    p = ref["params"]
    model = cfg.model
    assert isinstance(model, rb.Disk) and cfg.name == "paper-disk"
    assert float(model.m0) == p["m0"] and float(model.radius) == p["r"] and float(model.d2) == p["d2"]
    assert float(model.g) == p["g"]
    np.testing.assert_array_equal(np.asarray(model.chi0), p["chi0"])
    np.testing.assert_array_equal(np.asarray(model.masses), p["masses"])
    # circles of the given radii in the body x-z plane (6.5): zeta(0) = (r_i, 0, 0), zeta(pi/2) = (0, 0, r_i)
    radii = np.asarray(p["radii"])
    np.testing.assert_array_equal(np.asarray(model.rails.positions(np.zeros(4)))[:, 0], radii)
    np.testing.assert_allclose(np.asarray(model.rails.positions(np.full(4, np.pi / 2))), np.c_[0 * radii, 0 * radii, radii], atol=1e-15)
    np.testing.assert_array_equal(cfg.x0, ref["x0"])
    assert ref["state_labels"] == model.state_labels()
    # control (6.6): u_i = (-1)^i on [0, 0.1]
    np.testing.assert_array_equal(np.asarray(cfg.control(0.05)), [-1.0, 1.0, -1.0, 1.0])
    np.testing.assert_allclose(np.asarray(cfg.control(0.15)), 0.5 * np.array([-1.0, 1.0, -1.0, 1.0]), rtol=1e-14)
    np.testing.assert_array_equal(np.asarray(cfg.control(0.3)), np.zeros(4))
    assert cfg.t_span == (0.0, 20.0) and cfg.rtol == cfg.atol == 1e-12 and cfg.solver == "Dopri8"
    assert cfg.z_a == 0.0
    assert set(REFERENCE_TIMES) <= set(cfg.ts.tolist())


def test_paper_ball_matches_section_7():
    ref = _reference()["ball"]
    cfg = load_config("paper-ball")
    p = ref["params"]
    model = cfg.model
    assert isinstance(model, rb.Ball)
    np.testing.assert_array_equal(np.asarray(model.inertia), p["d"])
    np.testing.assert_array_equal(np.asarray(model.chi0), p["chi0"])
    np.testing.assert_array_equal(np.asarray(model.masses), p["masses"])
    expected = rb.CircleRail.paper(np.asarray(p["radii"]), np.asarray(p["v"]))
    theta = np.array([0.3, 1.1, -2.0])
    np.testing.assert_allclose(np.asarray(model.rails.positions(theta)), np.asarray(expected.zeta(theta)), atol=1e-15)
    np.testing.assert_array_equal(cfg.x0, ref["x0"])
    # verified convention: theta_a puts the system CM (nearly) straight above the GC: m0 chi0 + sum m_i zeta_i
    # = (2.6e-5, -7.9e-6, 0.6832) with the paper's rounded angles.
    moment = np.asarray(model.chi0) + np.asarray(model.rails.positions(cfg.x0[:3])).sum(axis=0)
    assert np.all(np.abs(moment[:2]) < 1e-4) and abs(moment[2] - 0.6832) < 1e-4
    np.testing.assert_array_equal(np.asarray(cfg.control(0.05)), np.ones(3))
    assert cfg.rtol == cfg.atol == 1e-10 and cfg.t_span == (0.0, 20.0)
    assert set(REFERENCE_TIMES) <= set(cfg.ts.tolist())
    np.testing.assert_array_equal(cfg.ts_requested, REFERENCE_TIMES)


@pytest.mark.parametrize("name", ["paper-ball", "paper-disk"])
def test_toml_round_trip(name):
    cfg = load_config(name)
    text = cfg.to_toml()
    assert tomllib.loads(text) == cfg.mapping
    again = build_from_mapping(tomllib.loads(text), name=name)
    np.testing.assert_array_equal(again.x0, cfg.x0)
    np.testing.assert_array_equal(again.ts, cfg.ts)


def test_dump_toml_special_values():
    m = {
        "description": 'quote " backslash \\ tab \t unicode φ',
        "model": {"x": 1e-300, "y": -0.0, "big": 1e300, "i": 7, "flag": True, "inf": math.inf},
        "masses": [{"rail": {"type": "circle", "rotation": [[1.0, 0.0], [0.0, 1.0]]}}, {"mass": 2}],
        "weird key": {"a.b": [1, 2]},
    }
    assert tomllib.loads(dump_toml(m)) == m


# ---- save times, solver ----------------------------------------------------------------


def _time_cfg(mapping, time_table):
    return build_from_mapping(_mutated(mapping, lambda m: m.__setitem__("time", time_table)))


def test_save_times_union_and_defaults(disk_mapping):
    cfg = _time_cfg(disk_mapping, {"t1": 2.0, "n_save": 5, "ts": [1.3, 0.5, 0.1]})
    np.testing.assert_array_equal(cfg.ts, [0.0, 0.1, 0.5, 1.0, 1.3, 1.5, 2.0])  # 0.5 not duplicated
    np.testing.assert_array_equal(cfg.ts_requested, [0.1, 0.5, 1.3])
    cfg = _time_cfg(disk_mapping, {"t0": 1.0, "t1": 2.0, "ts": [1.5, 2.0]})
    np.testing.assert_array_equal(cfg.ts, [1.5, 2.0])
    assert cfg.n_save is None and cfg.t_span == (1.0, 2.0)
    cfg = _time_cfg(disk_mapping, {"t1": 3.0})
    assert cfg.ts.shape == (DEFAULT_N_SAVE,) and cfg.ts[-1] == 3.0


def test_solver_names():
    for name, cls in SOLVERS.items():
        assert isinstance(make_solver(name.lower()), cls)
    with pytest.raises(ConfigError, match="solver.name"):
        make_solver("Euler")


def test_with_overrides_updates_mapping():
    cfg = load_config("paper-disk").with_overrides(rtol=1e-9, solver="tsit5", n_save=11)
    assert cfg.rtol == 1e-9 and cfg.solver == "Tsit5" and cfg.atol == 1e-12
    assert cfg.mapping["solver"]["rtol"] == 1e-9 and cfg.mapping["time"]["n_save"] == 11
    assert set(REFERENCE_TIMES) <= set(cfg.ts.tolist())
    with pytest.raises(ConfigError, match=r"^solver\.atol: must be positive"):
        cfg.with_overrides(atol=-1.0)


# ---- other rails, controls, initial states ----------------------------------------------


def test_all_rail_and_control_kinds(ball_mapping):
    def edit(m):
        m["masses"] = [
            {"mass": 0.5, "rail": {"type": "ellipse", "a": 0.5, "b": 0.3, "v": [0.3, 0.2, 1.0]}, "theta": 0.2},
            {"mass": 0.5, "rail": {"type": "figure_eight", "a": 0.5, "b": 0.4, "rotation": [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], "center": [0.0, 0.0, 0.1]}},
            {"mass": 0.5, "rail": {"type": "spoke", "direction": [0.0, 0.0, 2.0], "limits": [-0.5, 0.5]}, "theta_dot": 0.1},
            {"mass": 0.5, "rail": {"type": "circle", "radius": 0.4, "center": [0.1, 0.0, 0.0]}},
        ]
        m["control"] = {"type": "cubic_spline", "knots": [0.0, 1.0, 2.0], "values": [[0, 1, 0], [1, 0, 1], [0, 0, 0], [1, 1, 1]]}
        m["initial"] = {"q": [0.0, 1.0, 0.0, 0.0], "Omega": [0.1, 0.0, 0.0], "z": [1.0, 2.0]}

    cfg = build_from_mapping(_mutated(ball_mapping, edit))
    assert cfg.model.n == 4
    np.testing.assert_allclose(np.asarray(cfg.model.rails.positions(np.array([0.0, 0.0, 0.25, 0.0]))), [
        np.asarray(rb.EllipseRail(0.5, 0.3, rotation=rb.geometry.paper_rail_rotation(np.array([0.3, 0.2, 1.0]))).zeta(np.zeros(1)))[0],
        [0.0, 0.5, 0.1],
        [0.0, 0.0, 0.25],
        [0.5, 0.0, 0.0],
    ], atol=1e-15)
    assert isinstance(cfg.control, rb.CubicSplineControl)
    np.testing.assert_allclose(np.asarray(cfg.control(1.0)), [1.0, 0.0, 0.0, 1.0], atol=1e-14)
    np.testing.assert_array_equal(cfg.x0[:8], [0.2, 0, 0, 0, 0, 0, 0.1, 0])
    np.testing.assert_array_equal(cfg.x0[8:], [0, 1, 0, 0, 0.1, 0, 0, 1, 2])

    m = _mutated(ball_mapping, lambda m: m.__setitem__("control", {"type": "piecewise_linear", "knots": [0.0, 1.0], "values": [[0, 1], [0, 2], [0, 3]]}))
    np.testing.assert_allclose(np.asarray(build_from_mapping(m).control(0.5)), [0.5, 1.0, 1.5])
    m = _mutated(ball_mapping, lambda m: m.__setitem__("control", {"type": "constant", "values": [1, 2, 3]}))
    np.testing.assert_array_equal(np.asarray(build_from_mapping(m).control(7.0)), [1, 2, 3])
    m = _mutated(ball_mapping, lambda m: m.__setitem__("control", {"type": "paper_step", "signs": [1, -1, 1], "amplitude": 2.0}))
    np.testing.assert_array_equal(np.asarray(build_from_mapping(m).control(0.0)), [2, -2, 2])
    m = _mutated(ball_mapping, lambda m: m.pop("control"))
    np.testing.assert_array_equal(np.asarray(build_from_mapping(m).control(0.0)), [0, 0, 0])


def test_disk_options_and_no_masses(disk_mapping):
    def edit(m):
        m["model"]["chi0"] = [0.1, -0.2]
        m["model"]["force"] = [0.5, 0.0, 0.0]
        m["initial"] = {"phi": 0.3, "phi_dot": -0.1, "z": 2.5}
        m["solver"] = {"name": "Tsit5", "dt0": 1e-3}

    cfg = build_from_mapping(_mutated(disk_mapping, edit))
    np.testing.assert_array_equal(np.asarray(cfg.model.chi0), [0.1, 0.0, -0.2])
    np.testing.assert_array_equal(np.asarray(cfg.model.force(0.0)), [0.5, 0.0, 0.0])
    assert cfg.z_a == 2.5 and cfg.x0[-2:].tolist() == [0.3, -0.1]
    assert cfg.solver == "Tsit5" and cfg.dt0 == 1e-3 and cfg.rtol == rb.solve.DEFAULT_RTOL

    chaplygin = {"model": {"type": "ball", "m0": 1.0, "radius": 1.0, "inertia": [1.0, 1.0, 1.5], "g": 1.0}, "time": {"t1": 1.0}}
    cfg = build_from_mapping(chaplygin)
    assert cfg.model.n == 0 and cfg.x0.tolist() == [1, 0, 0, 0, 0, 0, 0, 0, 0]


# ---- errors ------------------------------------------------------------------------------


def _set(path, value):
    """Edit function setting a dotted/indexed key path like ``masses[2].rail.radius``."""
    def edit(m):
        parts = path.replace("]", "").replace("[", ".").split(".")
        node = m
        for p in parts[:-1]:
            node = node[int(p)] if p.isdigit() else node[p]
        node[parts[-1]] = value
    return edit


def _delete(path):
    def edit(m):
        parts = path.split(".")
        node = m
        for p in parts[:-1]:
            node = node[p]
        del node[parts[-1]]
    return edit


def _rename(table, old, new):
    def edit(m):
        m[table][new] = m[table].pop(old)
    return edit


BALL_ERRORS = [
    # misspellings found by a fresh-user trial without a hint (difflib's default cutoff, case)
    (_rename("model", "m0", "mo"), r"^model\.m0: required key is missing \(found unknown key 'model\.mo': did you mean 'm0'\?\)"),
    (_rename("solver", "rtol", "RTOL"), r"^solver\.RTOL: unknown key; did you mean 'rtol'\?"),
    (_set("colour", "red"), r"^colour: unknown key"),
    (_set("masses[1].rail.raidus", 0.5), r"^masses\[1\]\.rail\.raidus: unknown key; did you mean 'radius'\?"),
    (_set("masses[2].rail.radius", "big"), r"^masses\[2\]\.rail\.radius: expected a number, got string 'big'"),
    (_set("masses[2].rail.radius", -0.5), r"^masses\[2\]\.rail\.radius: must be positive"),
    (_set("masses[0].rail.radius", 1.0), r"^masses\[0\]\.rail: the rail reaches \|ζ\(θ\)\| = 1 >= radius 1: every rail must stay strictly inside the ball"),
    # the model numbers masses from 1 (mass 3), the file's path from 0 (ModelError.mass)
    (_set("masses[2].rail.radius", 1.2), r"^masses\[2\]\.rail: the rail reaches \|ζ\(θ\)\| = 1\.2 >= radius 1:"),
    (_set("masses[0].rail.rotation", [[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]]), r"^masses\[0\]\.rail: give either 'v'"),
    (_set("masses[0].rail.type", "square"), r"^masses\[0\]\.rail\.type: unknown value 'square'"),
    (_set("masses[0].rail", 0.5), r"^masses\[0\]\.rail: expected a table, got number 0.5"),
    (_set("masses[0].mass", True), r"^masses\[0\]\.mass: expected a number, got boolean true"),
    (_set("masses[0].rail.v", [0.0, 0.0]), r"^masses\[0\]\.rail\.v: expected 3 numbers, got 2"),
    (_set("masses[0].rail.v", [0.0, "x", 1.0]), r"^masses\[0\]\.rail\.v\[1\]: expected a number"),
    (_set("masses", {"mass": 1.0}), r"^masses: expected an array of tables"),
    (_delete("model.m0"), r"^model\.m0: required key is missing"),
    (_set("model.type", "cube"), r"^model\.type: unknown value 'cube'"),
    (_set("model.d2", 1.0), r"^model\.d2: unknown key"),
    (_set("model.chi0", [0.0, 0.0, -1.5]), r"^model\.chi0: "),
    (_set("model.inertia", [1.0, 1.0, 3.0]), r"^model: .*triangle inequality"),  # ModelError re-raised
    (_set("control.signs", [1.0, 1.0]), r"^control\.signs: expected 3 numbers"),
    (_set("control.signs", "pendulum"), r"^control\.signs: unknown value"),
    (_set("control.t_b", 0.05), r"^control\.t_b: must be larger than t_a"),
    (_set("control", {"type": "cubic_spline", "knots": [0.0, 1.0], "values": [[0, 1], [0, 1]]}), r"^control\.values: expected 3 rows"),
    (_set("control", {"type": "piecewise_linear", "knots": [1.0, 0.0], "values": [[0, 1]] * 3}), r"^control\.knots: must be strictly increasing"),
    (_set("initial.q", [1.0, 1.0, 0.0, 0.0]), r"^initial\.q: the versor must have unit length"),
    (_set("initial.phi", 0.0), r"^initial\.phi: unknown key"),
    (_delete("time.t1"), r"^time\.t1: required key is missing"),
    (_set("time.t1", -1.0), r"^time\.t1: must be larger than t0"),
    (_set("time.n_save", 10.5), r"^time\.n_save: expected an integer"),
    (_set("time.ts", [0.0, 25.0]), r"^time\.ts\[1\]: 25.0 lies outside"),
    (_set("solver.name", "RK4"), r"^solver\.name: unknown solver 'RK4'"),
    (_set("solver.max_steps", 0), r"^solver\.max_steps: must be at least 1"),
]


@pytest.mark.parametrize("edit, pattern", BALL_ERRORS)
def test_ball_errors_name_the_key(ball_mapping, edit, pattern):
    with pytest.raises(ConfigError, match=pattern):
        build_from_mapping(_mutated(ball_mapping, edit))


DISK_ERRORS = [
    (_set("model.inertia", [1.0, 1.0, 1.0]), r"^model\.inertia: unknown key"),
    (_set("model.chi0", [0.1, 0.2, 0.0]), r"^model\.chi0: a disk's χ0 must lie in the x–z plane"),
    (_set("masses[3].rail.v", [math.pi / 2, 0.0, 1.0]), r"^masses\[3\]\.rail: the rail leaves the disk's x–z plane \(\|ζ_y\| = "),
    (_set("masses[1].rail", {"type": "spoke", "direction": [1.0, 0.0, 0.0], "limits": [-0.5, 1.5]}), r"^masses\[1\]\.rail: the rail reaches"),
    (_set("initial.q", [1.0, 0.0, 0.0, 0.0]), r"^initial\.q: unknown key"),
    (_set("initial.z", [0.0, 0.0]), r"^initial\.z: expected a number"),
]


@pytest.mark.parametrize("edit, pattern", DISK_ERRORS)
def test_disk_errors_name_the_key(disk_mapping, edit, pattern):
    with pytest.raises(ConfigError, match=pattern):
        build_from_mapping(_mutated(disk_mapping, edit))


def test_load_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "broken.toml"
    bad.write_text("[model\ntype = 'ball'\n")
    with pytest.raises(ConfigError, match=r"broken\.toml: invalid TOML"):
        load_config(bad)
    good = tmp_path / "mine.toml"
    good.write_text(example_text("paper-disk"))
    cfg = load_config(str(good))
    assert cfg.name == "mine" and cfg.source == good
