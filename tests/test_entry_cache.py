"""The compiled launcher keeps the device entry it last launched with (launchpad/launch/_claunch/launcher.c):
it does not look the entry up again while launches stay on that device, and the loader's
:class:`~launchpad.core.loader.EntryTable` tells it of every change. Where the driver shows the process
one device, it does not ask for the current device either. On the fake device (tests/conftest.py): the
function each launch reaches the driver with, and how often the current-device query is called."""

from __future__ import annotations

import ctypes
import random

import pytest
import torch
from conftest import FakeGPU, why_executor_unavailable

import launchpad as lp
from launchpad.core.loader import EntryTable
from launchpad.launch import executor as _executor

pytestmark = pytest.mark.skipif(
    bool(why_executor_unavailable("compiled")), reason=why_executor_unavailable("compiled") or ""
)

SOURCE = 'extern "C" __global__ void axpy(float* y, const float* x, float a, int n) {}'


@pytest.fixture(scope="module")
def spec():
    return lp.compile_cuda(SOURCE, "axpy", arch="sm_90").spec


def _launched(spec, monkeypatch) -> tuple:
    """A kernel on the fake device (-1), launched once, and its launch of CPU tensors."""
    gpu = FakeGPU(monkeypatch, "compiled")
    k = gpu.install(lp.Kernel(spec, compiled=True))
    y, x = torch.randn(16), torch.randn(16)

    def launch() -> None:
        k.launch(1, 32, y, x, 2.0, 16)

    launch()
    return gpu, k, launch


def _other_function(gpu: FakeGPU, k: lp.Kernel, device: int) -> tuple:
    """The kernel's entry on ``device`` with a new function address the fake driver knows."""
    entry = k._loader.entries[device]
    address = entry.address + 0x40
    gpu._kernels[address] = k
    return entry, entry._replace(function=address, address=address)


def test_a_changed_entry_reaches_the_next_launch(spec, monkeypatch):
    gpu, k, launch = _launched(spec, monkeypatch)
    old, new = _other_function(gpu, k, -1)
    k._loader.entries[-1] = new  # as the loader replaces it (a raised shared-memory limit, a reload)
    launch()
    k[1, 32](torch.randn(16), torch.randn(16), 2.0, 16)
    assert [launch.function for launch in gpu.launches] == [old.address, new.address, new.address]
    for change in (lambda t: t.update({-1: old}), lambda t: t.__ior__({-1: old}), lambda t: t.setdefault(-1, old)):
        dict.__setitem__(k._loader.entries, -1, new)
        change(k._loader.entries)
        launch()
    assert [launch.function for launch in gpu.launches[3:]] == [old.address, old.address, new.address], (
        "setdefault changes nothing where the device has an entry"
    )
    assert k.fallbacks == 0


def test_an_unchanged_entry_is_not_looked_up_again(spec, monkeypatch):
    gpu, k, launch = _launched(spec, monkeypatch)
    old, new = _other_function(gpu, k, -1)
    dict.__setitem__(k._loader.entries, -1, new)  # behind the table's back: no reader is told
    launch()
    k._executor.forget()  # what the table calls on a change
    launch()
    assert [launch.function for launch in gpu.launches] == [old.address, old.address, new.address]


def test_a_removed_entry_is_not_launched_again(spec, monkeypatch):
    gpu, k, launch = _launched(spec, monkeypatch)
    _, new = _other_function(gpu, k, -1)
    dict.__setitem__(k._loader.entries, -1, new)
    k._loader.entries.pop(-1)  # as Kernel.close empties the table
    dict.__setitem__(k._loader.entries, -1, new)  # (the fake device has nothing to load)
    launch()
    assert gpu.launches[-1].function == new.address


def test_every_change_to_the_table_tells_each_live_reader():
    class Reader:
        forgotten = 0

        def forget(self) -> None:
            self.forgotten += 1

    table, reader, gone = EntryTable(), Reader(), Reader()
    table.add_reader(reader)
    table.add_reader(gone)
    del gone
    changes = [lambda: table.__setitem__(0, "a"), lambda: table.update({1: "b"}), lambda: table.setdefault(2, "c"),
               lambda: table.pop(2), lambda: table.pop(9, None), lambda: table.__delitem__(1), lambda: table.popitem(),
               lambda: table.__ior__({3: "d"}), lambda: table.clear()]  # fmt: skip
    for i, change in enumerate(changes, 1):
        change()
        assert reader.forgotten == i
    reads = [lambda: table.get(0), lambda: 0 in table, lambda: list(table.items()), lambda: dict(table)]
    for read in reads:
        read()
    assert reader.forgotten == len(changes)
    other = Reader()
    table.add_reader(other)
    assert [ref() for ref in table._readers] == [reader, other], "a reader that is gone is dropped at an addition"


def test_a_launcher_needs_a_table_that_tells_it(spec, monkeypatch):
    k = lp.Kernel(spec, compiled=True)
    monkeypatch.setattr(k._loader, "entries", {})
    with pytest.raises(AttributeError, match="add_reader"):
        _executor.build(k.spec, k._loader, compiled=True)


_CTX_GET_DEVICE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))


@pytest.mark.parametrize("visible", [1, 2])
def test_one_visible_device_is_not_asked_for(spec, monkeypatch, visible):
    """With one device the current device is 0 without cuCtxGetDevice; with two it is asked at each launch."""
    asked = []

    def ctx_get_device(out):
        asked.append(1)
        out[0] = 0
        return 0

    query = _CTX_GET_DEVICE(ctx_get_device)
    gpu = FakeGPU(monkeypatch, "compiled")
    k = gpu.install(lp.Kernel(spec, compiled=True), device=0)
    entry = k._loader.entries[0]
    k._loader.entries[0] = entry._replace(ctx_get_device=ctypes.cast(query, ctypes.c_void_p).value,
                                          visible_devices=visible)  # fmt: skip
    y, x = 0x1000, 0x2000  # raw device addresses: CPU tensors are not on device 0
    k.launch(1, 32, y, x, 2.0, 16)  # reads the new entry (the device from torch's stand-in)
    for _ in range(5):
        k.launch(1, 32, y, x, 2.0, 16)
    assert len(gpu.launches) == 6 and k.fallbacks == 0
    assert len(asked) == (0 if visible == 1 else 5)


@pytest.mark.parametrize("seed", range(12))
def test_random_device_switches_and_entry_changes_launch_the_current_entry(spec, monkeypatch, seed):
    """Random launches, device switches (two fake devices), entry replacements and forgets: every
    launch reaches the driver with the function of the entry the loader holds for the current device
    at that moment, as a lookup at every launch would."""
    rng = random.Random(seed)
    gpu = FakeGPU(monkeypatch, "compiled")
    k = gpu.install(lp.Kernel(spec, compiled=True), device=0)
    table, current = k._loader.entries, [0]
    table[1] = table[0]._replace(function=table[0].address + 0x20, address=table[0].address + 0x20)
    gpu._kernels[table[1].address] = k
    devices = _executor.Devices(lambda: current[0], lambda dev: 0x5000 + dev, gpu.cu_launch)
    executor = _executor.build(k.spec, k._loader, devices, compiled=True)
    monkeypatch.setattr(k, "launch", executor.launch)
    expected, fresh = [], table[0].address + 0x1000
    for _ in range(300):
        op = rng.random()
        if op < 0.5:
            k.launch(rng.randint(1, 4), 32, 0x1000, 0x2000, 2.0, 16)  # raw addresses: any fake device takes them
            expected.append((table[current[0]].address, 0x5000 + current[0]))
        elif op < 0.7:
            current[0] = rng.randint(0, 1)
        elif op < 0.9:
            fresh += 0x20
            gpu._kernels[fresh] = k
            device = rng.randint(0, 1)
            table[device] = table[device]._replace(function=fresh, address=fresh)
        else:
            executor.forget()
    assert [(launch.function, launch.stream) for launch in gpu.launches] == expected
    assert executor.compiled.fallbacks == 0
