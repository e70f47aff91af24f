"""One description of each layout the Python side hands the compiled module: the NamedTuples of
``launchpad/launch/layouts.py`` (and the loader's ``Entry``, the spec's ``LaunchPlan``) against the
field names the C side reads by name (``_claunch.LAYOUTS``). A field one side adds that the other
does not read fails here, not silently on a GPU.
"""

from __future__ import annotations

import dataclasses

import pytest
from conftest import why_executor_unavailable

from launchpad.core.loader import Entry
from launchpad.core.spec import LaunchPlan
from launchpad.launch import executor as _executor
from launchpad.launch import layouts

pytestmark = pytest.mark.skipif(bool(why_executor_unavailable("compiled")),
                                reason=why_executor_unavailable("compiled") or "")  # fmt: skip

#: Fields only Python reads, per layout (with why): anything else the C side must read.
PYTHON_ONLY = {
    "Entry": {"function", "module"},  # the cuda.bindings function (the Python executor's), what it keeps loaded
    "LaunchPlan": {"grid_in_clusters", "max_grid_words"},  # C reads grid_scale (which it gives); the words: refusals
}


def python_fields(name: str) -> set[str]:
    if name == "Entry":
        return set(Entry._fields)
    if name == "LaunchPlan":
        return {f.name for f in dataclasses.fields(LaunchPlan)} | {"grid_scale"}
    return set(getattr(layouts, name)._fields)


def test_every_layout_is_described_on_both_sides():
    c_side = set(_executor._claunch.LAYOUTS)
    assert c_side == set(layouts.__all__) | {"Entry", "LaunchPlan"}


@pytest.mark.parametrize("name", sorted(set(layouts.__all__) | {"Entry", "LaunchPlan"}))
def test_the_c_side_reads_exactly_the_fields_python_gives(name):
    read = _executor._claunch.LAYOUTS[name]
    assert len(set(read)) == len(read), f"{name}: C reads a field twice"
    assert set(read) == python_fields(name) - PYTHON_ONLY.get(name, set()), name


def test_a_positional_tuple_is_refused_naming_the_field():
    claunch = _executor._claunch
    with pytest.raises(TypeError, match=r"^a LauncherTable needs the field ops \(tuple has none\)"):
        claunch.Launcher(
            (),
        )
    with pytest.raises(TypeError, match=r"^a ReplayTables needs the field inputs"):
        claunch.Replay(())
