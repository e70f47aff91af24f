"""Which parameters a kernel writes, read from its PTX (launchpad.core.ptx_writes): Numba's PTX
compiled here for sm_90, a Triton kernel whose TTIR cannot say, a Gluon kernel, and hand-written
PTX for the instructions compilers rarely print."""

from __future__ import annotations

import re

import pytest

import launchpad as lp
from launchpad.core.ptx_writes import written_params

numba_cuda = pytest.importorskip("numba.cuda")
from numba import cuda  # noqa: E402


def numba_written(fn, signature):
    from launchpad.frontends.numba.frontend import _numpy_row_stack_alias

    with _numpy_row_stack_alias():  # (numba-cuda 0.30 under NumPy 2.5, as from_numba compiles: on the GPU machine,
        # this file's first Numba compile in a process failed without it where no other test had lent the alias)
        ptx, _ = cuda.compile(fn, signature, device=False, abi="numba", output="ptx", cc=(9, 0))
    (entry,) = re.findall(r"\.entry\s+([\w$.]+)\s*\(", ptx)
    found = written_params(ptx, entry)
    return None if found is None else [k for k, w in enumerate(found) if w]


def copy_twice(out, x, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = x[i] * 2


def scatter(out, x, idx):
    i = cuda.grid(1)
    if i < x.size:
        out[idx[i]] = x[i]  # where it writes depends on memory: not followed


def atomic_sum(acc, x):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(acc, 0, x[i])


def through_shared(out, x):
    s = cuda.shared.array(128, numba_cuda.float32) if hasattr(numba_cuda, "float32") else None
    i = cuda.threadIdx.x
    s[i] = x[i]
    cuda.syncthreads()
    out[i] = s[127 - i]


def test_numba_kernels():
    # a 1-D array is 7 parameters (meminfo, parent, nitems, itemsize, data, shape, stride): out is 0-6
    assert numba_written(copy_twice, "void(float32[:], float32[:], int32)") == [4, 5, 6]
    assert numba_written(atomic_sum, "void(float32[:], float32[:])") == [4]
    assert numba_written(scatter, "void(float32[:], float32[:], int32[:])") is None


def test_a_numba_kernel_compiled_to_ptx_carries_what_it_writes():
    k = lp.from_numba(copy_twice, "void(float32[:], float32[:], int32)", arch="sm_90", lto=False)
    assert [k.spec.args[i].name for i in k.spec.metadata["written"]] == ["out"]
    default = lp.from_numba(copy_twice, "void(float32[:], float32[:], int32)", arch="sm_90")
    assert "written" not in default.spec.metadata  # LTO-IR: declared written, every array


PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(
	.param .u64 k_param_0,
	.param .u64 k_param_1,
	.param .align 8 .b8 k_param_2[16],
	.param .u64 k_param_3
)
{
	.reg .b64 %rd<10>;
	.reg .b32 %r<4>;
	.reg .pred %p<2>;
	ld.param.u64 %rd1, [k_param_0];
	ld.param.u64 %rd2, [k_param_1];
	ld.param.u64 %rd3, [k_param_2+8];
	cvta.to.global.u64 %rd4, %rd1;
	ld.global.f32 %r1, [%rd4];
	mov.u32 %r2, %tid.x;
	@%p1 bra $L__BB0_2;
	st.shared.f32 [%r2], %r1;
	atom.shared.add.u32 %r3, [%r2], 1;
	cvta.to.global.u64 %rd5, %rd3;
	BODY
$L__BB0_2:
	ret;
}
"""


@pytest.mark.parametrize(("body", "expected"), [
    ("st.global.f32 [%rd5+4], %r1;", [2]),  # a pointer inside the struct parameter
    ("red.global.add.f32 [%rd5], %r1;", [2]),
    ("atom.global.cas.b32 %r3, [%rd2], %r1, %r2;", [1]),
    ("cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r2], 128;", [1]),
    ("cp.async.ca.shared.global [%r2], [%rd2], 16;", []),  # into shared memory
    ("{\n\t.reg .b64 %t;\n\tadd.s64 %t, %rd5, 8;\n\tmov.b64 %rd6, %t;\n\t}\n\tst.global.f32 [%rd6], %r1;", [2]),
    ("ld.global.u64 %rd7, [%rd2];\n\tst.global.f32 [%rd7], %r1;", None),  # a pointer read from memory
    ("call.uni f, (%rd1);", None),
    ("sust.b.1d.b32.trap [%rd1, {%r2}], {%r1};", None),
])  # fmt: skip
def test_hand_written_ptx(body, expected):
    found = written_params(PTX.replace("BODY", body), "k")
    assert (None if found is None else [k for k, w in enumerate(found) if w]) == expected


def test_a_triton_kernel_whose_ttir_cannot_say_is_read_from_its_ptx():
    pytest.importorskip("triton")
    from test_triton_writes import inline_asm
    from triton.backends.compiler import GPUTarget

    k = lp.from_triton(inline_asm, signature={"x": "*fp32", "out": "*fp32"}, constexprs={"PURE": False, "BLOCK": 128},
                       target=GPUTarget("cuda", 90, 32))  # fmt: skip
    assert [k.spec.args[i].name for i in k.spec.metadata["written"]] == ["out"]
