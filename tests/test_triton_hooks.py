"""Triton's launch hooks (``triton.knobs.runtime.launch_enter_hook`` / ``launch_exit_hook``, what
proton sets) around launchpad's launches of Triton kernels, on CPU with ``fake_gpu``: called as
Triton's launcher calls them, with the same metadata, in both executors, and not at all when unset."""

from __future__ import annotations

import contextlib

import pytest

import launchpad
from launchpad.frontends.triton import launcher as lpt

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from test_triton_launcher import SM90, Launchers, aligned  # noqa: E402
from triton_abi import NULL_SCRATCH  # noqa: E402

SEEN: list = []


def add_metadata(grid, metadata, args):
    """A proton-style ``launch_metadata``: what the profiler records for one launch."""
    SEEN.append(("launch_metadata", grid, metadata.num_warps, sorted(args)))
    n = args["n"]
    return {"name": f"add n={n}", "flops32": n, "bytes": 3 * 4 * n}


@triton.jit(launch_metadata=add_metadata)
def profiled_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@contextlib.contextmanager
def hooks(enter, exit_):
    """Set Triton's hooks as a profiler does: on a HookChain (3.5+) or as plain callables (3.4)."""
    runtime = triton.knobs.runtime
    chains = hasattr(getattr(type(runtime), "launch_enter_hook", None), "calls")  # a HookChain
    if chains:
        runtime.launch_enter_hook.add(enter)
        runtime.launch_exit_hook.add(exit_)
    else:
        runtime.launch_enter_hook, runtime.launch_exit_hook = enter, exit_
    try:
        yield
    finally:
        if chains:
            runtime.launch_enter_hook.remove(enter)
            runtime.launch_exit_hook.remove(exit_)
        else:
            runtime.launch_enter_hook = runtime.launch_exit_hook = None


def recorder(tag):
    def hook(metadata):
        data = metadata.get()
        SEEN.append((tag, {k: data[k] for k in sorted(data)}))

    return hook


@pytest.fixture
def env(fake_gpu, monkeypatch):
    SEEN.clear()
    return Launchers(fake_gpu, monkeypatch)


def test_hooks_see_what_tritons_launcher_passes(env):
    launcher = lpt.TritonLauncher(profiled_add, target=SM90)
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    launcher[(4,)](x, y, out, 4096, BLOCK=1024)  # unset: nothing called
    assert SEEN == [] and len(env.fake.launches) == 1
    (kernel,) = launcher.kernels.values()
    function = kernel._loader.entries[-1][3]
    with hooks(recorder("enter"), recorder("exit")):
        launcher[(4,)](x, y, out, 4096, BLOCK=1024)
        launcher[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]), 2)](x, y, out, 2048, BLOCK=1024)
    expected = {"name": "profiled_add", "function": function, "stream": 0x5000}
    assert SEEN == [
        ("launch_metadata", (4,), 4, ["BLOCK", "n", "out_ptr", "x_ptr", "y_ptr"]),  # the grid as given
        ("enter", {**expected, "name": "add n=4096", "flops32": 4096, "bytes": 49152}),
        ("exit", {**expected, "name": "add n=4096", "flops32": 4096, "bytes": 49152}),
        ("launch_metadata", (2, 2), 4, ["BLOCK", "n", "out_ptr", "x_ptr", "y_ptr"]),
        ("enter", {**expected, "name": "add n=2048", "flops32": 2048, "bytes": 24576}),
        ("exit", {**expected, "name": "add n=2048", "flops32": 2048, "bytes": 24576}),
    ]
    assert len(env.fake.launches) == 3 and env.fake.last.grid == (2, 2, 1)
    SEEN.clear()
    launcher[(4,)](x, y, out, 4096, BLOCK=1024)  # unset again: back to no calls
    assert SEEN == []


def test_hooks_on_kernels_and_artifacts(env, tmp_path):
    compiled = launchpad.triton_launcher(profiled_add, target=SM90).warmup(aligned(64), aligned(64), aligned(64), 64,
                                                                            BLOCK=64)  # fmt: skip
    saved = env.fake.install(launchpad.load(compiled.save(tmp_path / "add.json")))
    x = aligned(64)
    with hooks(recorder("enter"), recorder("exit")):
        compiled[(1,)](x, x, x, 64)
        saved[(1,)](x, x, x, 64)
    names = [(tag, data["name"]) for tag, data in (s for s in SEEN if s[0] != "launch_metadata")]
    # the kernel made from the JIT function keeps its launch_metadata; the artifact has the bare metadata
    assert names == [("enter", "add n=64"), ("exit", "add n=64"), ("enter", "profiled_add"), ("exit", "profiled_add")]
    assert env.fake.launches[-1].params[-len(NULL_SCRATCH) :] == list(NULL_SCRATCH)


def test_hooks_around_a_launch_with_its_grid_and_block_by_name(env):
    """``kernel.launch(grid=..., block=..., ...)`` takes the Python executor's binder: the hooks are
    called around it as around a positional launch, the launch_metadata with the arguments given by
    name; a launch without its block is refused, naming the kernel, and calls no hook."""
    compiled = launchpad.triton_launcher(profiled_add, target=SM90).warmup(aligned(64), aligned(64), aligned(64), 64,
                                                                            BLOCK=64)  # fmt: skip
    x = aligned(64)
    with hooks(recorder("enter"), recorder("exit")):
        compiled.launch(grid=(1,), block=None, x_ptr=x, y_ptr=x, out_ptr=x, n=64)
        with pytest.raises(launchpad.ArgumentTypeError, match=r"'profiled_add': launch.* without the block"):
            compiled.launch((1,))
    # the JIT function's launch_metadata saw the arguments given by name (n among them)
    names = [(tag, data["name"]) for tag, data in (s for s in SEEN if s[0] != "launch_metadata")]
    assert names == [("enter", "add n=64"), ("exit", "add n=64")]
    assert len(env.fake.launches) == 1


def test_a_failing_enter_hook_stops_the_launch(env):
    def refuse(metadata):
        raise RuntimeError("profiler full")

    launcher = lpt.TritonLauncher(profiled_add, target=SM90)
    x = aligned(64)
    with hooks(refuse, recorder("exit")), pytest.raises(RuntimeError, match="profiler full"):
        launcher[(1,)](x, x, x, 64, BLOCK=64)
    assert env.fake.launches == [] and not [s for s in SEEN if s[0] == "exit"]


def test_hooks_are_checked_per_launch_not_cached(env):
    launcher = lpt.TritonLauncher(profiled_add, target=SM90)
    x = aligned(64)
    calls = []
    for i in range(3):
        with hooks(lambda md, i=i: calls.append(i), lambda md: None):
            launcher[(1,)](x, x, x, 64, BLOCK=64)
        launcher[(1,)](x, x, x, 64, BLOCK=64)
    assert calls == [0, 1, 2] and len(env.fake.launches) == 6


def test_hooks_set_on_the_knobs_object_are_seen_at_the_next_launch(env):
    """Hooks assigned to ``triton.knobs.runtime`` itself (its ``__dict__``) after launches that found
    none are seen at the next launch: a chain of the object's own, its list grown without the object
    changing, too; None there hides the class's chain. (What a launch finds is not kept between
    launches: a dict watcher, tried, misses attributes that Python 3.13 stores in an object's inline
    values, and this test failed with it.)"""
    runtime = triton.knobs.runtime
    class_chain = getattr(type(runtime), "launch_enter_hook", None)
    chains = hasattr(class_chain, "calls")  # Triton 3.5+: HookChains on the class
    launcher = lpt.TritonLauncher(profiled_add, target=SM90)
    x = aligned(64)
    calls: list = []

    def launch(note):
        launcher[(1,)](x, x, x, 64, BLOCK=64)
        calls.append(note)

    def by_class(md):
        calls.append("class chain")

    launch("none")
    launch("none")
    try:
        runtime.launch_enter_hook = lambda md: calls.append("plain hook")
        launch("after plain")
        runtime.launch_enter_hook = None
        launch("after None")
        if chains:
            class_chain.add(by_class)
            launch("class chain set, object's None")
            del runtime.launch_enter_hook
            launch("class chain set, object's removed")
            own = type(class_chain)()
            runtime.launch_enter_hook = own
            launch("own empty chain")
            class_chain.remove(by_class)
            own.add(lambda md: calls.append("own chain"))
            launch("own chain grown")
            own.calls.clear()
            launch("own chain emptied")
    finally:
        vars(runtime).pop("launch_enter_hook", None)
        if chains and by_class in class_chain.calls:
            class_chain.remove(by_class)
    launch("all removed")
    expected = ["none", "none", "plain hook", "after plain", "after None"]
    if chains:
        expected += [
            "class chain set, object's None",
            "class chain",
            "class chain set, object's removed",
            "own empty chain",
            "own chain",
            "own chain grown",
            "own chain emptied",
        ]
    assert calls == [*expected, "all removed"]
    assert len(env.fake.launches) == len([c for c in calls if c not in ("plain hook", "class chain", "own chain")])
