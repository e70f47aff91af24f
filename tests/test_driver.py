"""The driver package checks every call's result: a failure the caller can answer (an address that is
no device memory, a node the driver will not make device-updatable) is told apart from any other,
which raises :class:`CudaError` naming the call; graph reading copes with ``extra`` launches; the
offsets the sequences write copy nodes at are the driver structs' own. No GPU: the bindings'
functions are replaced by scripted ones."""

from __future__ import annotations

import ctypes
import struct

import pytest
from cuda.bindings import driver as cu

import launchpad as lp
from launchpad.core import driver as _driver
from launchpad.core.driver import device as _device
from launchpad.core.driver import graphs as _graphs
from launchpad.sequences.capture import MEMCPY_FIELDS

R = cu.CUresult


def test_an_entry_point_the_driver_does_not_have_is_refused(monkeypatch):
    monkeypatch.setattr(_device, "_initialized", True)
    monkeypatch.setattr(_device._cu, "cuGetProcAddress", lambda name, version, flags: (R.CUDA_SUCCESS, 0, 0))
    with pytest.raises(lp.CudaError, match=r"^cuGetProcAddress\('cuGraphLaunch'\) failed: CUDA_ERROR_NOT_FOUND"):
        _driver.entry_points("cuGraphLaunch")


@pytest.mark.parametrize("result, expected", [(R.CUDA_ERROR_INVALID_VALUE, None), (R.CUDA_SUCCESS, 3)])
def test_pointer_device_answers_or_raises(monkeypatch, result, expected):
    monkeypatch.setattr(_device._cu, "cuPointerGetAttribute", lambda attr, address: (result, 3))
    assert _driver.pointer_device(0x1000) == expected
    monkeypatch.setattr(_device._cu, "cuPointerGetAttribute", lambda attr, address: (R.CUDA_ERROR_DEINITIALIZED, 0))
    with pytest.raises(
        lp.CudaError, match=r"^cuPointerGetAttribute\(DEVICE_ORDINAL\) failed: CUDA_ERROR_DEINITIALIZED"
    ):
        _driver.pointer_device(0x1000)


def test_function_params_lists_until_the_driver_says_there_are_no_more(monkeypatch):
    layout = [(0, 8), (8, 4)]

    def info(f, i):
        return (R.CUDA_SUCCESS, *layout[i]) if i < len(layout) else (R.CUDA_ERROR_INVALID_VALUE, 0, 0)

    monkeypatch.setattr(_device._cu, "cuFuncGetParamInfo", info)
    assert _driver.function_params(0x10) == layout
    monkeypatch.setattr(_device._cu, "cuFuncGetParamInfo", lambda f, i: (R.CUDA_ERROR_NOT_SUPPORTED, 0, 0))
    assert _driver.function_params(0x10) is None
    monkeypatch.setattr(_device._cu, "cuFuncGetParamInfo", lambda f, i: (R.CUDA_ERROR_INVALID_CONTEXT, 0, 0))
    with pytest.raises(lp.CudaError, match=r"^cuFuncGetParamInfo failed: CUDA_ERROR_INVALID_CONTEXT"):
        _driver.function_params(0x10)


def test_the_oversized_mode_refused_or_failed(monkeypatch):
    from launchpad.core.driver import modules

    if modules._OVERSIZED_MODE is None:
        pytest.skip("these bindings know no oversized shared-memory mode")
    monkeypatch.setattr(_device._cu, "cuFuncSetAttribute", lambda f, a, v: (R.CUDA_ERROR_INVALID_VALUE,))
    assert _driver.set_oversized_shared(0x10) is False
    monkeypatch.setattr(_device._cu, "cuFuncSetAttribute", lambda f, a, v: (R.CUDA_ERROR_ILLEGAL_ADDRESS,))
    with pytest.raises(
        lp.CudaError, match=r"^cuFuncSetAttribute\(SHARED_MEMORY_MODE\) failed: CUDA_ERROR_ILLEGAL_ADDRESS"
    ):
        _driver.set_oversized_shared(0x10)


def test_a_failed_unload_is_reported_with_its_call(monkeypatch):
    monkeypatch.setattr(_device, "_primary", {0: 0xC0})
    monkeypatch.setattr(_device._cu, "cuCtxPushCurrent", lambda ctx: (R.CUDA_SUCCESS,))
    monkeypatch.setattr(_device._cu, "cuModuleUnload", lambda m: (R.CUDA_SUCCESS,))
    monkeypatch.setattr(_device._cu, "cuCtxPopCurrent", lambda: (R.CUDA_ERROR_INVALID_CONTEXT, None))
    with pytest.warns(ResourceWarning, match=r"could not unload a module on cuda:0: cuCtxPopCurrent: "
                      r"CUDA_ERROR_INVALID_CONTEXT"):  # fmt: skip
        _driver.unload_module(0xA0, 0)


def test_a_node_the_driver_will_not_make_device_updatable(monkeypatch):
    monkeypatch.setattr(_device._cu, "cuGraphKernelNodeSetAttribute", lambda n, a, v: (R.CUDA_ERROR_NOT_SUPPORTED,))
    assert _driver.make_device_updatable(0x100) is None
    monkeypatch.setattr(_device._cu, "cuGraphKernelNodeSetAttribute", lambda n, a, v: (R.CUDA_ERROR_OUT_OF_MEMORY,))
    with pytest.raises(
        lp.CudaError,
        match=r"^cuGraphKernelNodeSetAttribute\(DEVICE_UPDATABLE_KERNEL_NODE\) failed: CUDA_ERROR_OUT_OF_MEMORY",
    ):
        _driver.make_device_updatable(0x100)


def test_a_kernel_launched_with_extra_is_read_from_its_buffer():
    """A node captured from a launch with ``extra`` (one packed buffer: cuBLAS's way) has no
    ``kernelParams``; its block is read from the buffer the list points at."""
    block = struct.pack("<QQi", 0x7000, 0x8000, 42) + bytes(4)
    buffer = ctypes.create_string_buffer(block, len(block))
    size = ctypes.c_size_t(len(block))
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
    assert _graphs._extra_buffer(ctypes.addressof(extra), 20) == block[:20]
    assert _graphs._extra_buffer(ctypes.addressof(extra), 64) is None  # less than the layout needs


def test_the_copy_nodes_addresses_sit_where_sequences_write_them():
    """``MEMCPY_FIELDS``: the offsets of ``srcDevice``/``dstDevice`` and ``dst`` in the driver's structs."""
    m = cu.CUDA_MEMCPY3D()
    m.srcDevice, m.dstDevice = 0x1111222233334444, 0x5555666677778888
    raw = ctypes.string_at(m.getPtr(), 200)
    assert [int.from_bytes(raw[o : o + 8], "little") for o in MEMCPY_FIELDS["memcpy"]] == [int(m.srcDevice),
                                                                                          int(m.dstDevice)]  # fmt: skip
    s = cu.CUDA_MEMSET_NODE_PARAMS()
    s.dst = 0x1234567890
    assert int.from_bytes(ctypes.string_at(s.getPtr(), 40)[: MEMCPY_FIELDS["memset"][0] + 8], "little") == 0x1234567890
