"""Sweeps (rollball_jax.app.sweep, ``rollball sweep``/``plot-sweep``): sweep files, member
tables, the Zarr results store, resuming after a kill, Dask execution.

"Identical" below means bit for bit: a resumed or distributed sweep computes the same
chunks with the same compiled programs as an uninterrupted in-process run.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from rollball_jax import batch as bt
from rollball_jax.app.cli import app
from rollball_jax.app.sweep import (
    SweepError,
    coord_name,
    load_sweep_spec,
    open_sweep,
    parse_path,
    run_sweep,
    set_path,
    sweep_from_mapping,
    sweep_status,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

runner = CliRunner()

# 3 radii x 2 random angles = 6 members in 3 chunks; radius 1.2 puts rail 2 outside the
# ball, so chunk 2 holds two invalid members.
SPEC = """
description = "test sweep"
base = "paper-ball"

[overrides]
"time.t1" = 1.0
"time.n_save" = 5
"time.ts" = []
"solver.rtol" = 1e-6
"solver.atol" = 1e-6

[[grid]]
path = "masses[1].rail.radius"
values = [0.8, 0.9, 1.2]

[random]
seed = 3
n = 2

[[random.params]]
path = "masses[0].theta"
uniform = [-0.3, 0.3]

[run]
chunk = 2
"""

RESULT_VARS = ("status", "t_final", "x_final", "gc", "energy", "distance", "heading", "num_steps")


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("spec") / "tiny.toml"
    p.write_text(SPEC, encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory):
    """Environment for child processes: a shared persistent XLA compilation cache, so the
    CLI subprocesses and Dask workers compile the sweep's program once."""
    env = dict(os.environ)
    env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path_factory.mktemp("xla_cache"))
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.5"
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("XLA_FLAGS", None)
    return env


@pytest.fixture(scope="module")
def reference(spec_file, tmp_path_factory):
    """The uninterrupted, in-process run."""
    out = tmp_path_factory.mktemp("ref") / "results"
    summary = run_sweep(load_sweep_spec(spec_file), out, progress=False)
    return out, summary, open_sweep(out)


def _equal(a, b):
    for name in RESULT_VARS:
        np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]), err_msg=name)


# ---- sweep files -----------------------------------------------------------------------


def test_paths():
    assert parse_path("masses[1].rail.radius") == ["masses", 1, "rail", "radius"]
    assert parse_path("model.inertia[0]") == ["model", "inertia", 0]
    assert coord_name("masses[1].rail.radius") == "masses_1_rail_radius"
    m = {"masses": [{"rail": {"radius": 0.5}}], "model": {"inertia": [1.0, 2.0, 3.0]}}
    set_path(m, "masses[0].rail.radius", 0.7)
    set_path(m, "model.inertia[2]", 4.0)
    set_path(m, "control.amplitude", 2.0)  # missing tables are created
    assert m["masses"][0]["rail"]["radius"] == 0.7 and m["model"]["inertia"] == [1.0, 2.0, 4.0]
    assert m["control"] == {"amplitude": 2.0}
    for bad in ("", "masses[1", "masses..x", "[0].a", "a."):
        with pytest.raises(SweepError):
            parse_path(bad)
    with pytest.raises(SweepError, match=r"masses\[3\] does not exist"):
        set_path(m, "masses[3].mass", 1.0)


def test_spec_table_order_and_determinism(spec_file):
    spec = load_sweep_spec(spec_file)
    assert spec.size == 6 and spec.n_chunks == 3 and spec.paths == ["masses[1].rail.radius", "masses[0].theta"]
    t = spec.table()
    np.testing.assert_array_equal(t["masses[1].rail.radius"], [0.8, 0.8, 0.9, 0.9, 1.2, 1.2])  # grid point first
    theta = t["masses[0].theta"]
    assert theta[0] == theta[2] == theta[4] and theta[1] == theta[3] == theta[5]  # same samples at every grid point
    assert np.all(np.abs(theta) <= 0.3)
    np.testing.assert_array_equal(load_sweep_spec(spec_file).table()["masses[0].theta"], theta)  # seeded
    assert spec.digest() == load_sweep_spec(spec_file).digest()
    assert spec.with_run(mode="lockstep").digest() != spec.digest()
    from rollball_jax import batch as bt
    # run.mode, group_size and dt become the batch strategy object (options the mode has only)
    assert spec.mode == "adaptive" and spec.strategy() == bt.Adaptive()
    assert spec.with_run(mode="fixed", dt=0.05, group_size=16).strategy() == bt.Fixed(dt=0.05, group_size=16)
    assert spec.with_run(mode="lockstep", group_size=64).strategy() == bt.Lockstep(group_size=64)
    m = spec.member_mapping({p: v[3] for p, v in t.items()})
    assert m["masses"][1]["rail"]["radius"] == 0.9 and m["masses"][0]["theta"] == theta[3]
    assert "ts" not in m["time"] and m["time"]["t1"] == 1.0


@pytest.mark.parametrize(
    "patch, match",
    [
        ({"grid": [{"path": "time.t1", "values": [1.0]}]}, r"grid\[0\].path: 'time.t1': only model, masses, control"),
        ({"grid": [{"path": "masses[7].mass", "values": [1.0]}]}, r"grid\[0\].path: masses\[7\].mass: masses\[7\] does not exist"),
        ({"grid": [{"path": "model.m0", "values": [-1.0]}]}, r"grid\[0\].path: model.m0 = -1.0: model.m0: must be positive"),
        ({"grid": [{"path": "model.m0", "value": [1.0]}]}, r"grid\[0\].value: unknown key"),
        # a value from linspace (a NumPy float) is printed as a number, not as np.float64(0.5)
        ({"grid": [{"path": "control.amplitud", "linspace": [0.5, 1.5, 3]}]},
         r"grid\[0\].path: control.amplitud = 0.5: control.amplitud: unknown key; did you mean 'amplitude'"),
        ({"random": {"seed": 0, "n": 2, "params": [{"path": "model.g", "uniform": [2.0, 1.0]}]}}, r"needs lo < hi"),
        ({"random": {"seed": -1, "n": 2, "params": [{"path": "model.g", "uniform": [1.0, 2.0]}]}}, r"random.seed: expected a non-negative integer; got -1"),
        ({"run": {"mode": "fast"}}, r"run.mode: unknown mode 'fast'"),
        ({"bogus": 1}, r"bogus: unknown key in a sweep file"),
        ({"base": "nope"}, r"base: 'nope' is neither a file"),
    ],
)
def test_spec_errors_name_the_key(patch, match):
    mapping = {"base": "paper-ball", "overrides": {"time.t1": 1.0, "time.ts": []}}
    mapping.update(patch)
    with pytest.raises(SweepError, match=match):
        sweep_from_mapping(mapping)


def test_shipped_example_sweep_is_valid():
    result = runner.invoke(app, ["show-sweep", "sweep-paper-ball"])
    assert result.exit_code == 0
    spec = sweep_from_mapping(tomllib.loads(result.stdout))
    assert spec.size == 60 and spec.n_chunks == 3
    # a sweep smaller than its chunk is solved at its own size (was padded to the chunk)
    assert spec.batch_size == spec.chunk and spec.with_run(chunk=256).batch_size == 60


# ---- running ---------------------------------------------------------------------------


def test_results_store(reference, spec_file):
    out, summary, ds = reference
    assert summary["complete"] and summary["succeeded"] == 4 and summary["invalid"] == 2 and summary["failed"] == 0
    assert ds.sizes == {"member": 6, "time": 5, "component": 15, "xyz": 3}
    assert list(ds["status"].values) == [0, 0, 0, 0, bt.STATUS_INVALID, bt.STATUS_INVALID]
    assert "reaches" in json.loads(ds.attrs["invalid_messages"])["4"]  # the rail leaves the ball
    np.testing.assert_array_equal(ds["masses_1_rail_radius"].values, [0.8, 0.8, 0.9, 0.9, 1.2, 1.2])
    assert ds["masses_1_rail_radius"].attrs["path"] == "masses[1].rail.radius"
    assert np.all(np.isnan(ds["distance"].values[4:])) and np.all(ds["distance"].values[:4] > 0)
    # a member equals its own single run (same solver settings; mode adaptive)
    import rollball_jax as rb
    from rollball_jax.app.config import build_from_mapping

    spec = load_sweep_spec(spec_file)
    cfg = build_from_mapping(spec.member_mapping({p: v[3] for p, v in spec.table().items()}))
    sol = cfg.simulate()
    np.testing.assert_allclose(ds["x_final"].values[3], sol.xs[-1], rtol=0, atol=1e-10)
    np.testing.assert_allclose(ds["gc"].values[3], sol.gc, rtol=0, atol=1e-10)
    np.testing.assert_allclose(ds["energy"].values[3], sol.energy, rtol=0, atol=1e-10)
    assert isinstance(cfg.model, rb.Ball)
    # rerunning a complete sweep computes nothing
    again = run_sweep(spec, out, progress=False)
    assert again["chunks_run"] == 0
    with pytest.raises(SweepError, match=r"holds a different sweep .*: run.chunk: 2 there, 3 now; use another --out"):
        run_sweep(spec.with_run(chunk=3), out, progress=False)


@pytest.mark.slow
def test_resume_after_kill_gives_identical_results(reference, spec_file, cache_env, tmp_path):
    """SIGKILL a CLI sweep after its first chunk is written; the same command resumes,
    does not recompute that chunk, and the results equal the uninterrupted run."""
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "rollball_jax.app.cli", "sweep", str(spec_file), "--out", str(out), "--no-progress", "-q"]
    env = dict(cache_env, ROLLBALL_SWEEP_THROTTLE="3")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    marker0 = out / "chunks" / "c000000.json"
    deadline = time.monotonic() + 240
    while not marker0.exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "first chunk never written"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    status = sweep_status(out)
    assert not status["complete"] and status["chunks_done"] == 1
    first = json.loads(marker0.read_text())
    assert first["pid"] == proc.pid
    # plotting an incomplete sweep says so (it did not)
    plotted = runner.invoke(app, ["plot-sweep", str(out), "--out", str(tmp_path / "fig")])
    assert plotted.exit_code == 0 and "warning: the sweep is incomplete (1 of 3 chunks done)" in plotted.stderr
    done = subprocess.run(cmd, env=cache_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sweep_status(out)["complete"]
    assert json.loads(marker0.read_text()) == first  # chunk 0 was not recomputed
    _equal(open_sweep(out), reference[2])


@pytest.mark.slow
def test_dask_local_cluster_gives_identical_results(reference, spec_file, cache_env, tmp_path, monkeypatch):
    """Chunks run on a Dask LocalCluster with two worker processes."""
    pytest.importorskip("distributed")
    for k in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "JAX_PLATFORMS"):
        monkeypatch.setenv(k, cache_env[k])  # inherited by the worker processes
    out = tmp_path / "dask"
    summary = run_sweep(load_sweep_spec(spec_file), out, workers=2, progress=False)
    assert summary["complete"] and summary["chunks_run"] == 3
    pids = {json.loads(p.read_text())["pid"] for p in (out / "chunks").glob("c*.json")}
    assert os.getpid() not in pids
    _equal(open_sweep(out), reference[2])


def test_cli_sweep_errors_and_plot(reference, tmp_path):
    out, _, _ = reference
    result = runner.invoke(app, ["plot-sweep", str(out), "--out", str(tmp_path / "fig"), "--quantity", "heading"])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (tmp_path / "fig").iterdir())
    assert names == ["gc_paths.png", "heading_masses_1_rail_radius_masses_0_theta.png",
                     "heading_vs_masses_1_rail_radius.png", "status.png"]
    result = runner.invoke(app, ["plot-sweep", str(out), "--x", "model.g"])
    assert result.exit_code == 2 and "not a swept parameter" in result.stderr
    # found by a fresh-user trial: --paths 0 wrote an empty figure, -3 raised NumPy's error,
    # the same parameter as x and y dropped the heat map silently
    for args, message in ((["--paths", "0"], "number of GC paths must be a positive integer; got 0"),
                          (["--paths", "-3"], "got -3"),
                          (["--x", "masses[1].rail.radius", "--y", "masses[1].rail.radius"], "name the same parameter")):
        result = runner.invoke(app, ["plot-sweep", str(out), "--out", str(tmp_path / "fig2"), *args])
        assert result.exit_code == 2 and message in result.stderr, result.output
    bad = tmp_path / "bad.toml"
    bad.write_text('base = "paper-ball"\n[[grid]]\npath = "solver.rtol"\nvalues = [1e-6]\n')
    result = runner.invoke(app, ["sweep", str(bad), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "only model, masses, control and initial" in result.stderr
    result = runner.invoke(app, ["plot-sweep", str(tmp_path)])
    assert result.exit_code == 2 and "not a sweep results directory" in result.stderr


def test_fast_build_equals_building_each_member(reference, tmp_path):
    """build = "fast" writes the swept values into the base design's arrays: same numbers
    as building (and validating) every member; ranges whose ends are invalid are refused."""
    mapping = tomllib.loads(SPEC)
    mapping["grid"][0]["values"] = [0.8, 0.9]
    each = sweep_from_mapping(mapping, name="each")
    fast = each.with_run(build="fast")
    assert fast.digest() != each.digest()
    run_sweep(each, tmp_path / "each", progress=False)
    run_sweep(fast, tmp_path / "fast", progress=False)
    _equal(open_sweep(tmp_path / "each"), open_sweep(tmp_path / "fast"))
    _equal(open_sweep(tmp_path / "fast"), reference[2].isel(member=slice(0, 4)))
    with pytest.raises(SweepError, match=r"build = 'fast': masses\[1\].rail.radius = 1.2 \(end of its range\) is invalid"):
        run_sweep(load_sweep_spec_text(SPEC).with_run(build="fast"), tmp_path / "bad", progress=False)
    v = tomllib.loads(SPEC)
    v["grid"] = [{"path": "masses[1].rail.v[1]", "values": [0.0, 0.1]}]
    with pytest.raises(SweepError, match="enters the design through a computation"):
        run_sweep(sweep_from_mapping(v).with_run(build="fast"), tmp_path / "v", progress=False)


def load_sweep_spec_text(text):
    return sweep_from_mapping(tomllib.loads(text))


@pytest.mark.slow
def test_group_modes_see_every_swept_value_and_each_members_disk_position(tmp_path):
    """Paper disk, grid initial.z = [0, 1] × masses[0].mass = [1 (the base's), −1 (invalid),
    2], mode lockstep. Found by a fresh-user trial: the group modes decided which leaves a
    path moves from its two smallest values, here the invalid one and the base's, so the
    mass was held at the base value in every member (the mass-2 members ended where the
    mass-1 ones did, status 0); and a group's GC positions used its first member's z_a.
    Now: the mass-2 members differ from the mass-1 ones, each member equals its own
    rb.simulate (lockstep vs adaptive steps: measured 2e-11, bound 100 tol), and the GC
    starts at each member's z (exactly) and is shifted by it (the disk's motion does not
    depend on z: equal to rounding)."""
    import rollball_jax as rb
    from rollball_jax.app.config import build_from_mapping

    mapping = {"base": "paper-disk",
               "overrides": {"time.t1": 2.0, "time.n_save": 5, "time.ts": [], "solver.rtol": 1e-9, "solver.atol": 1e-9},
               "grid": [{"path": "initial.z", "values": [0.0, 1.0]}, {"path": "masses[0].mass", "values": [1.0, -1.0, 2.0]}],
               "run": {"mode": "lockstep", "chunk": 8}}
    spec = sweep_from_mapping(mapping, name="mask")
    summary = run_sweep(spec, tmp_path / "mask", progress=False)
    assert summary["succeeded"] == 4 and summary["invalid"] == 2
    ds = open_sweep(tmp_path / "mask")
    z, mass, status = ds["initial_z"].values, ds["masses_0_mass"].values, ds["status"].values
    ok = status == 0
    np.testing.assert_array_equal(mass[ok], [1.0, 2.0, 1.0, 2.0])
    gc = ds["gc"].values
    np.testing.assert_array_equal(gc[ok, 0, 0], z[ok])
    for m in (1.0, 2.0):
        a, b = np.flatnonzero(ok & (mass == m) & (z == 0.0))[0], np.flatnonzero(ok & (mass == m) & (z == 1.0))[0]
        np.testing.assert_allclose(gc[b, :, 0] - 1.0, gc[a, :, 0], rtol=0, atol=1e-12)
    i1, i2 = np.flatnonzero(ok & (mass == 1.0) & (z == 1.0))[0], np.flatnonzero(ok & (mass == 2.0) & (z == 1.0))[0]
    assert np.max(np.abs(ds["x_final"].values[i2] - ds["x_final"].values[i1])) > 1e-2
    cfg = build_from_mapping(spec.member_mapping({"initial.z": 1.0, "masses[0].mass": 2.0}))
    direct = rb.simulate(cfg.model, cfg.control, cfg.x0, cfg.t_span, ts=cfg.ts, rtol=cfg.rtol, atol=cfg.atol, z_a=cfg.z_a)
    np.testing.assert_allclose(ds["x_final"].values[i2], direct.xs[-1], rtol=0, atol=100 * 1e-9)
    np.testing.assert_allclose(gc[i2], direct.gc, rtol=0, atol=100 * 1e-9)


def test_unreachable_scheduler_is_named(spec_file, tmp_path, monkeypatch):
    """A Dask scheduler that cannot be reached is reported as such (the CLI said "cannot
    write <out>"). The connection is refused by a stand-in Client: nothing is solved."""
    import dask.distributed

    def refuse(address, *a, **k):
        raise OSError(f"Timed out trying to connect to {address}")

    monkeypatch.setattr(dask.distributed, "Client", refuse)
    with pytest.raises(SweepError, match=r"cannot connect to the Dask scheduler tcp://127.0.0.1:9: Timed out"):
        run_sweep(load_sweep_spec(spec_file), tmp_path / "s", scheduler="tcp://127.0.0.1:9", progress=False)


def test_group_mode_leaf_scan_builds_few_designs(monkeypatch):
    """Which leaves a swept path moves is found from at most three valid values: a path that
    moves no model or control leaf (an initial angle) was scanned over all its values (303
    builds of ~17 ms for n = 300, before anything was solved; found by a code review). The
    scan is the sweep's internal ``_plan._batched_mask``; nothing is solved."""
    import rollball_jax.app.config as config
    from rollball_jax.app.sweep import _plan

    builds = []
    real = config.build_from_mapping
    monkeypatch.setattr(config, "build_from_mapping", lambda *a, **k: builds.append(1) or real(*a, **k))
    mapping = {"base": "paper-disk", "random": {"seed": 1, "n": 300, "params": [{"path": "masses[0].theta", "uniform": [-0.5, 0.5]}]},
               "run": {"mode": "lockstep", "chunk": 64}}
    spec = sweep_from_mapping(mapping, name="scan")
    builds.clear()  # (reading the sweep file builds its first member)
    mask = _plan._batched_mask(spec, spec.table())
    assert mask is not None and not any(mask) and len(builds) <= 4  # the base and three values
