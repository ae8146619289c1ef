"""The curated public API: every package declares ``__all__``, and its names resolve.

A name in ``__all__`` that does not resolve breaks ``from ... import *`` with an
``AttributeError``; a private name there would make an implementation detail public.
"""

from __future__ import annotations

import importlib
import types

import pytest

PACKAGES = ["rollball_jax", "rollball_jax.app", "rollball_jax.batch", "rollball_jax.design",
            "rollball_jax.app.sweep", "rollball_jax.dynamics", "rollball_jax.rigid"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_package_declares_its_public_names(name):
    package = importlib.import_module(name)
    public = package.__all__
    assert len(public) == len(set(public)), sorted(n for n in public if public.count(n) > 1)
    assert not [n for n in public if n.startswith("_")]
    for attribute in public:
        # a submodule named in __all__ may load on first use (importlib does what `import *` does)
        if not hasattr(package, attribute):
            importlib.import_module(f"{name}.{attribute}")  # ModuleNotFoundError: a dangling name
        assert hasattr(package, attribute)


def test_top_level_names_cover_what_it_imports():
    """Every public class, function and core submodule ``import rollball_jax`` binds is in
    ``__all__`` (a name added to ``__init__`` without it would be public but unlisted);
    the application layer is not (it needs the ``app`` extra)."""
    import rollball_jax as rb

    bound = {k for k, v in vars(rb).items() if not k.startswith("_") and k not in ("jax", "annotations")
             and (not isinstance(v, types.ModuleType) or v.__name__.startswith("rollball_jax."))}
    bound -= {"app", "config", "sweep", "output", "plotting", "sweep_plots"}  # loaded by other tests, maybe
    assert bound <= set(rb.__all__), sorted(bound - set(rb.__all__))
    assert not {"app", "config", "sweep", "output", "plotting", "sweep_plots"} & set(rb.__all__)
    assert {"batch", "design"} <= set(rb.__all__)  # lazily loaded, still public
