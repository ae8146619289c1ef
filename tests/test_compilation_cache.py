"""The persistent compilation cache is explicit, writes compiled programs and is reused.

Each run is a fresh Python process (the cache is a process-wide JAX option, and this
test process must not start writing one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, json
    import jax, jax.numpy as jnp
    import rollball_jax as rb
    from rollball_jax.compilation_cache import compilation_cache_dir
    before = compilation_cache_dir()
    path = rb.enable_compilation_cache(sys.argv[1], min_compile_time_s=0.0)
    disk = rb.Disk(1.0, 1.0, 1.0, (0.0, 0.0), 1.0, [1.0], [rb.CircleRail(0.5)])
    x0 = disk.initial_state(theta=[0.3])
    phi = rb.final_state(disk, rb.ConstantControl([0.2]), x0, (0.0, 1.0), rtol=1e-8, atol=1e-8)[2]
    print(json.dumps({"before": None if before is None else str(before), "path": str(path), "phi": float(phi)}))
    """
)


def _run(cache_dir):
    env = dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(cache_dir)], capture_output=True, text=True, env=env,
                         timeout=600, check=True)
    import json

    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_cache_is_off_until_enabled_then_written_and_reused(tmp_path):
    cache = tmp_path / "xla"
    first = _run(cache)
    assert first["before"] is None  # importing the package does not switch it on
    assert first["path"] == str(cache)
    files = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert files, "no compiled program was written"
    second = _run(cache)
    # The second process finds its programs in the cache: nothing new is compiled and
    # the result is bit-identical.
    assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == files
    assert second["phi"] == first["phi"]
