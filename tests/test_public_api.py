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


def _public_modules():
    """Every module of the package whose dotted path has no private part (``_rk``, ...)."""
    import pkgutil

    import rollball_jax

    names = []
    for info in pkgutil.walk_packages(rollball_jax.__path__, "rollball_jax."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            names.append(info.name)
    return sorted(names)


def test_every_public_module_declares_a_documented_public_api():
    """A public module lists its public names; each is defined there (or a submodule), is not
    private, and a listed class or function has a docstring. Implementation modules (the
    engines, argument checks) are private (``_discrete_adjoint``, ``_checks``, ...)."""
    modules = _public_modules()
    assert "rollball_jax.sensitivity" in modules and "rollball_jax.app.sweep" in modules  # the walk finds them
    assert not {"rollball_jax.checks", "rollball_jax.discrete_adjoint"} & set(modules)
    undocumented, missing = [], []
    for name in modules:
        module = importlib.import_module(name)
        assert hasattr(module, "__all__"), f"{name} has no __all__"
        assert not [n for n in module.__all__ if n.startswith("_")], name
        for attribute in module.__all__:
            if not hasattr(module, attribute):
                try:
                    importlib.import_module(f"{name}.{attribute}")
                except ModuleNotFoundError:
                    missing.append(f"{name}.{attribute}")
                    continue
            value = getattr(module, attribute)
            doc = (value.__doc__ or "").strip() if isinstance(value, (type, types.FunctionType)) else "text"
            if not doc or doc.startswith(f"{attribute}("):  # dataclasses write the signature when there is none
                undocumented.append(f"{name}.{attribute}")
    assert not missing, missing
    assert not undocumented, undocumented


def test_implementation_modules_are_not_reachable_as_public_attributes():
    import rollball_jax as rb

    for name in ("checks", "discrete_adjoint"):
        with pytest.raises(AttributeError):
            getattr(rb, name)
