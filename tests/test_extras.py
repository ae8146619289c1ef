"""The application layer's dependencies are an extra: without them the physics core works
and every entry point of the app names the extra to install.

"Without them" is simulated in a fresh Python process by blocking one module of the extra
(``sys.modules[name] = None`` makes its import fail, as if it were not installed).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest

from rollball_jax import _extras

SCRIPT = textwrap.dedent(
    """
    import sys, json
    sys.modules[sys.argv[1]] = None          # this dependency of the app extra is "not installed"
    import rollball_jax as rb
    exec("from rollball_jax import *", {})  # every name of rb.__all__ (batch, design too), without the extra
    out = {"loaded": sorted(m for m in ("typer", "xarray", "zarr", "dask", "matplotlib") if sys.modules.get(m))}
    disk = rb.Disk(1.0, 1.0, 1.0, (0.0, 0.0), 1.0, [1.0], [rb.CircleRail(0.5)])
    x0 = disk.initial_state(theta=[0.3])
    out["phi"] = float(rb.final_state(disk, rb.ConstantControl([0.2]), x0, (0.0, 1.0), rtol=1e-8, atol=1e-8)[2])
    try:
        rb.config
    except ImportError as e:
        out["config_error"] = str(e)
    from rollball_jax._cli_entry import main
    try:
        main()
    except SystemExit as e:
        out["cli_exit"] = e.code
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("blocked", ["typer", "zarr"])
def test_core_works_and_app_names_the_extra_when_a_dependency_is_missing(blocked):
    run = subprocess.run([sys.executable, "-c", SCRIPT, blocked], check=False, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []  # import rollball_jax (and import *) loads none of the app's dependencies
    # the core still solves: φ(1) of a disk with a mass driven at θ̈ = 0.2 is finite and moved
    assert math.isfinite(out["phi"]) and abs(out["phi"]) > 1e-6
    for message in (out["config_error"], run.stderr):
        assert 'pip install "rollball-jax[app]"' in message and f"missing: {blocked}" in message
    assert out["cli_exit"] == 2
    assert "error: the rollball command needs the 'app' extra" in run.stderr


def test_nothing_missing_in_the_test_environment():
    """The test extra includes the app extra: every module it provides is importable."""
    assert _extras.missing() == []
    _extras.require("anything")  # no error


def test_missing_and_require_on_an_absent_module():
    name = "rollball_jax_surely_not_installed_module"
    assert _extras.missing(("numpy", name)) == [name]
    with pytest.raises(ImportError, match=rf"feature X needs the 'app' extra: .*missing: {name}"):
        _extras.require("feature X", ("numpy", name))
