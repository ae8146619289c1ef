"""Every Python code block of the README and of docs/*.md runs as written.

Blocks of one file run in order in one namespace (a later block may use names an earlier
one defined, as a reader following the page would); each file starts fresh. Output is
not checked here: the facts the examples show are asserted by the other tests.
"""

from __future__ import annotations

import pathlib
import re

import matplotlib
import pytest

matplotlib.use("Agg")

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(page: pathlib.Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def test_pages_have_examples():
    # The extraction itself must find the examples (a changed fence would skip them all).
    assert len(python_blocks(ROOT / "README.md")) >= 2
    assert sum(len(python_blocks(p)) for p in PAGES) >= 5
    assert SLOW_PAGES <= {p.name for p in PAGES if python_blocks(p)}  # a renamed page is not silently unmarked


#: pages whose examples take >= 4 s on 2 cores (tests marked slow: tests/conftest.py)
SLOW_PAGES = {"rigid_bodies.md", "README.md"}


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_PAGES else p
                                  for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_code_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    namespace: dict = {"__name__": "__docs__"}
    for i, block in enumerate(python_blocks(page)):
        code = compile(block, f"{page.name}[block {i + 1}]", "exec")
        exec(code, namespace)  # noqa: S102 - running the documented example is the test
