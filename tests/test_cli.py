"""The ``rollball`` command line end to end: runs, files written, reference values, errors.

One paper-ball run (with figures) and one paper-disk run (no figures, overrides) are shared
by the tests through module-scoped fixtures to keep the suite fast.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from typer.testing import CliRunner

import rollball_jax
from rollball_jax.app.cli import app
from rollball_jax.app.config import example_text

REFERENCE = Path(__file__).resolve().parent / "data" / "paper_examples.json"
FIGURES = ("paths_body.png", "paths_spatial.png", "gc_path.png", "time_series.png")
# The paper's tolerances (1e-10 ball, 1e-12 disk) give a global error ~1e-9 at t = 20
# (measured: ~8e-10 with steps landing on the kinks); 1e-8 leaves a margin.
FINAL_TOL = 1e-8
# Intermediate requested times (dense output of Dopri8): ~3e-9 observed for the ball.
REQUESTED_TOL = 1e-7

runner = CliRunner()


def _reference(kind):
    if not REFERENCE.exists():
        pytest.skip(f"reference file {REFERENCE} not available")
    return json.loads(REFERENCE.read_text())[kind]


@pytest.fixture(scope="module")
def ball_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "paper-ball"
    result = runner.invoke(app, ["run", "paper-ball", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result, out


@pytest.fixture(scope="module")
def disk_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "disk"
    result = runner.invoke(app, ["run", "paper-disk", "-o", str(out), "--no-plots", "--n-save", "201", "--rtol", "1e-12", "--solver", "dopri8", "-q"])
    assert result.exit_code == 0, result.output
    return result, out


def test_run_prints_summary(ball_run):
    result, out = ball_run
    text = result.stdout
    assert "paper-ball: ball with 3 point masses" in text
    assert "final GC (spatial)" in text and "accepted" in text and result.stderr == ""
    for name in ("trajectory.nc", "summary.json", "config.toml", *FIGURES):
        assert name in text


def test_ball_summary_matches_reference(ball_run):
    ref = _reference("ball")
    summary = json.loads((ball_run[1] / "summary.json").read_text())
    assert summary["state_labels"] == ref["state_labels"]
    assert summary["t_final"] == 20.0
    np.testing.assert_allclose(summary["state_final"], ref["states"]["20"], rtol=0, atol=FINAL_TOL)
    np.testing.assert_allclose(summary["gc_final"][:2], ref["gc_position"]["20"], rtol=0, atol=FINAL_TOL)
    req = summary["requested_states"]
    assert req["t"] == ref["t_out"]
    np.testing.assert_allclose(req["states"], [ref["states"][k] for k in ref["states"]], rtol=0, atol=REQUESTED_TOL)


def test_summary_fields(ball_run):
    summary = json.loads((ball_run[1] / "summary.json").read_text())
    assert summary["model_type"] == "ball" and summary["solver"] == "Dopri8"
    assert summary["rtol"] == summary["atol"] == 1e-10
    assert summary["steps"]["accepted"] > 0 and summary["steps"]["rejected"] >= 0
    assert summary["wall_time_s"] > 0
    assert summary["rollball_jax_version"] == rollball_jax.__version__
    assert summary["state_final_named"]["q0"] == summary["state_final"][6]
    assert np.isfinite(summary["energy_initial"]) and np.isfinite(summary["energy_final"])


def test_netcdf_contents(ball_run):
    out = ball_run[1]
    summary = json.loads((out / "summary.json").read_text())
    with xr.open_dataset(out / "trajectory.nc") as ds:
        ds.load()
    assert ds.attrs["rollball_jax_version"] == rollball_jax.__version__
    config = tomllib.loads(ds.attrs["config_toml"])
    assert config == tomllib.loads(example_text("paper-ball"))
    assert json.loads(ds.attrs["config_json"]) == config
    assert dict(ds.sizes) == {"time": 2001, "component": 15, "mass": 3, "xyz": 3, "body_axis": 3}
    assert list(ds["component"].values) == summary["state_labels"]
    np.testing.assert_array_equal(ds["state"].values[-1], summary["state_final"])
    for name in ("gc", "contact_point", "omega_body", "omega_spatial", "cm_body", "cm_spatial"):
        assert ds[name].dims == ("time", "xyz")
    assert ds["orientation"].dims == ("time", "xyz", "body_axis")
    assert ds["masses_body"].dims == ds["masses_spatial"].dims == ("time", "mass", "xyz")
    assert ds["energy"].dims == ("time",)
    np.testing.assert_array_equal(ds["time"].values[ds["requested"].values.astype(bool)], summary["requested_states"]["t"])
    # masses stay on their rails: |zeta_i| = r_i in the body frame
    np.testing.assert_allclose(np.linalg.norm(ds["masses_body"].values, axis=-1).max(axis=0), [0.95, 0.9, 0.85], rtol=1e-12)


def test_run_directory_files(ball_run):
    out = ball_run[1]
    for name in FIGURES:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert tomllib.loads((out / "config.toml").read_text()) == tomllib.loads(example_text("paper-ball"))
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no temp files left


def test_run_into_an_earlier_run_replaces_it(ball_run, tmp_path):
    """A run into the directory of an earlier one (the default runs/<name> of a rerun)
    removes the earlier run's files it does not write itself: the paper ball's figures are
    gone after a --no-plots disk run there (they stayed, beside the disk's trajectory),
    files that are not the run's are kept, and summary.json lists the figures too."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(ball_run[1], out)
    (out / "notes.txt").write_text("mine")
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["files"]) >= set(FIGURES)
    # a name the run does not write is never removed, even if a summary lists it
    (out / "summary.json").write_text(json.dumps(summary | {"files": summary["files"] + ["notes.txt"]}))
    args = ["--no-plots", "--n-save", "201", "--rtol", "1e-12", "--solver", "dopri8"]
    result = runner.invoke(app, ["run", "paper-disk", "-o", str(out), *args])
    assert result.exit_code == 0, result.output
    assert "replaced the earlier run there (removed its" in result.output
    assert not list(out.glob("*.png")) and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "notes.txt", "summary.json", "trajectory.nc"]
    assert json.loads((out / "summary.json").read_text())["files"] == ["config.toml", "summary.json", "trajectory.nc"]
    # a summary.json rollball did not write (no version) is not obeyed at all (a fresh-user
    # trial lost its files to one listing them)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "important.csv").write_text("a")
    (mine / "gc_path.png").write_text("my own figure")
    (mine / "summary.json").write_text(json.dumps({"files": ["important.csv", "gc_path.png"]}))
    result = runner.invoke(app, ["run", "paper-disk", "-o", str(mine), *args])
    assert result.exit_code == 0, result.output
    assert "replaced" not in result.output
    assert (mine / "important.csv").read_text() == "a" and (mine / "gc_path.png").read_text() == "my own figure"


def test_disk_run_with_overrides(disk_run):
    result, out = disk_run
    assert result.stdout == ""  # --quiet
    assert not list(out.glob("*.png"))  # --no-plots
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_times"] == 201 and summary["solver"] == "Dopri8"
    config = tomllib.loads((out / "config.toml").read_text())
    assert config["time"]["n_save"] == 201 and config["solver"]["name"] == "dopri8"
    ref = _reference("disk")
    np.testing.assert_allclose(summary["state_final"], ref["states"]["20"], rtol=0, atol=FINAL_TOL)
    np.testing.assert_allclose(summary["gc_final"][0], ref["gc_position"]["20"], rtol=0, atol=FINAL_TOL)


def test_examples_and_show_config():
    result = runner.invoke(app, ["examples"])
    assert result.exit_code == 0
    assert "paper-ball" in result.stdout and "paper-disk" in result.stdout
    result = runner.invoke(app, ["show-config", "paper-ball"])
    assert result.exit_code == 0 and result.stdout == example_text("paper-ball")
    result = runner.invoke(app, ["show-config", "nope"])
    assert result.exit_code == 2 and "no shipped example named 'nope'" in result.stderr


def test_help_texts():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0 and "run" in result.stdout and "show-config" in result.stdout
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0 and "--no-plots" in result.stdout and "--out" in result.stdout


def _config_error(tmp_path, edit):
    mapping = tomllib.loads(example_text("paper-ball"))
    edit(mapping)
    from rollball_jax.app.config import dump_toml

    path = tmp_path / "bad.toml"
    path.write_text(dump_toml(mapping))
    return runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m["masses"][0]["rail"].__setitem__("radius", 1.5), "masses[0].rail: the rail reaches"),
        (lambda m: m["masses"][1].__setitem__("thetta", 0.0), "masses[1].thetta: unknown key; did you mean 'theta'?"),
        (lambda m: m["model"].__setitem__("m0", "heavy"), "model.m0: expected a number, got string 'heavy'"),
    ],
)
def test_config_errors_exit_2_with_one_line(tmp_path, edit, message):
    result = _config_error(tmp_path, edit)
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_missing_config_exits_2(tmp_path):
    result = runner.invoke(app, ["run", str(tmp_path / "nothing.toml")])
    assert result.exit_code == 2 and "no such config file" in result.stderr


def test_failed_solve_exits_1(tmp_path):
    path = tmp_path / "short.toml"
    path.write_text(
        '[model]\ntype = "ball"\nm0 = 1.0\nradius = 1.0\ninertia = [1.0, 1.0, 1.5]\ng = 1.0\n'
        "[initial]\nOmega = [1.0, 0.5, 0.2]\n[time]\nt1 = 10.0\nn_save = 3\n[solver]\nmax_steps = 2\n"
    )
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "--no-plots"])
    assert result.exit_code == 1
    assert "short: solve failed" in result.stderr and "Traceback" not in result.output


def test_unwritable_out_is_refused_before_the_solve(tmp_path, monkeypatch):
    """An --out that is a file (or under one) is refused before anything is solved (it
    was found only after the solve; fresh-user trial), and nothing is created."""
    import rollball_jax.app.config as config

    afile = tmp_path / "afile"
    afile.write_text("mine")

    def no_solve(self):
        raise AssertionError("solved before checking --out")

    monkeypatch.setattr(config.RunConfig, "simulate", no_solve)
    for out, why in ((afile, "is a file, not a directory"), (afile / "sub", "is a file, not a directory")):
        result = runner.invoke(app, ["run", "paper-disk", "--out", str(out), "--no-plots"])
        assert result.exit_code == 1 and f"cannot write the run directory {out}: {afile} {why}" in result.stderr, result.output
    assert afile.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
