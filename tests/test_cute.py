"""The CuTe DSL front end on the CPU: layouts read from CuTe types, checked against the cubin's
parameter sizes and against CuTe's own argument packing; compiles for sm_90a without a GPU; the bytes
reaching the driver (``fake_gpu``, both executors); refusals naming the kernel and argument; saved
kernels that load without CuTe DSL."""

from __future__ import annotations

import ctypes
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import launchpad as lp
from launchpad import ArgumentError, ArgumentTypeError, LaunchpadError, UnsupportedVersion
from launchpad.frontends.cute.args import struct_of
from launchpad.frontends.cute.layout import parse_memref

HERE = Path(__file__).parent
CUBINS = HERE / "cubins" / "cute"


def q(*values):
    return struct.pack(f"<{len(values)}q", *values)


# --- layouts from CuTe types (no CuTe DSL needed) ----------------------------------------------------


@pytest.mark.parametrize(
    "text, size, fields",
    [
        ('!cute.memref<f32, gmem, align<16>, "(?,?{div=8}):(?{i64 div=8},1)">', 24,
         [("shape", 0, 8, 4), ("shape", 1, 12, 4), ("stride", 0, 16, 8)]),
        ('!cute.memref<f32, gmem, "(?):(1)">', 16, [("shape", 0, 8, 4)]),
        ('!cute.memref<bf16, gmem, "(4,8):(8,1)">', 8, []),
        ('!cute.memref<f32, gmem, "(?,?,?):(?,?,?)">', 32,
         [("shape", 0, 8, 4), ("shape", 1, 12, 4), ("shape", 2, 16, 4), ("stride", 0, 20, 4), ("stride", 1, 24, 4),
          ("stride", 2, 28, 4)]),
        ('!cute.memref<f64, gmem, "(2,?,3,?):(?{i64 div=3},?{i64 div=3},?{i64},1)">', 40,
         [("shape", 1, 8, 4), ("shape", 3, 12, 4), ("stride", 0, 16, 8), ("stride", 1, 24, 8), ("stride", 2, 32, 8)]),
        ('!cute.memref<i8, generic, "(?,?):(1,?{i64})">', 24, [("shape", 0, 8, 4), ("shape", 1, 12, 4), ("stride", 1, 16, 8)]),
    ],
)  # fmt: skip
def test_layouts_from_cute_types(text, size, fields):
    layout = parse_memref(text)
    assert layout.size == size and [tuple(f) for f in layout.fields] == fields
    assert struct_of(layout.fields, layout.size).size == size


@pytest.mark.parametrize(
    "text, words",
    [
        ('!cute.memref<f32, smem, "(?):(1)">', "smem memory"),
        ('!cute.memref<f32, gmem, "((8,16),(?,?)):((1,8),(?{i64},128))">', "hierarchical"),
        ('!cute.memref<f4E2M1FN, gmem, "(?):(1)">', "no torch dtype"),
        ("!cute.tma_atom<something>", "cannot pass"),
    ],
)
def test_types_launchpad_cannot_pass_are_refused(text, words):
    with pytest.raises(LaunchpadError, match=words) as info:
        parse_memref(text, "kernel 'k', parameter 'x'")
    assert "kernel 'k', parameter 'x'" in str(info.value)


# --- with CuTe DSL: compiles, layouts against the cubin and CuTe's own packing ------------------------

cutlass = pytest.importorskip("cutlass", reason="CuTe DSL (PyPI nvidia-cutlass-dsl) is not installed")
cute = pytest.importorskip("cutlass.cute")
import cute_kernels as ck  # noqa: E402
import cute_probe as probe  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402


@pytest.fixture
def fallbacks(monkeypatch):
    """Launches the compiled executor handed to the Python one (counted at the Python launch)."""
    from launchpad.launch import pylaunch

    counted: list[tuple] = []
    build = pylaunch.build

    def counting_build(spec, runtime, devices):
        made = build(spec, runtime, devices)
        inner = made.launch

        def launch(*args, **kw):
            counted.append(args)
            return inner(*args, **kw)

        made.launch = launch
        return made

    monkeypatch.setattr(pylaunch, "build", counting_build)
    return counted


def cute_view(x, marks, align):
    t = from_dlpack(x, assumed_align=align)
    if marks == "dynamic":
        t = t.mark_layout_dynamic()
    elif marks == "compact":
        t = t.mark_compact_shape_dynamic(mode=x.dim() - 1, divisibility=2)
    return t


SIGNATURES = [  # (dtype, shape, view, marks, align)
    (torch.float32, (64,), None, "dynamic", 16),
    (torch.float16, (6, 8), None, "dynamic", 16),
    (torch.bfloat16, (4, 8), None, "static", 2),
    (torch.int32, (3, 4, 8), None, "dynamic", 4),
    (torch.int8, (2, 3, 4, 16), None, "compact", 1),
    (torch.float64, (5, 6), "t", "dynamic", 8),
    (torch.float32, (4, 6, 10), "slice", "dynamic", 4),
    (torch.int64, (2, 2, 2, 2), None, "static", 8),
    (torch.float32, (10, 12), None, "compact", 16),
]


def make(dtype, shape, view):
    x = (torch.arange(torch.Size(shape).numel()) % 7 + 1).to(dtype).reshape(shape)
    if view == "t":
        x = x.t()
    elif view == "slice":
        x = x[:, ::2, 1:]
    return x


@pytest.mark.parametrize(
    "dtype, shape, view, marks, align", SIGNATURES, ids=[f"{s[0]}-{s[1]}-{s[3]}" for s in SIGNATURES]
)
def test_layout_matches_the_cubin_and_cutes_own_packing(fake_gpu, fallbacks, dtype, shape, view, marks, align):
    """The struct launchpad packs from a tensor is byte for byte the one CuTe's JIT call packs from
    the same tensor (its argument's C value), and the cubin's parameter is that size."""
    x = make(dtype, shape, view)
    t = cute_view(x, marks, align)
    k = lp.from_cute(probe.probe, (t, cutlass.Int32(0), cutlass.Float32(0)), arch="sm_90")
    assert k.spec.metadata["arch"] == "sm_90a"
    layout = k.spec.args[0].options
    theirs = ctypes.string_at(t.__c_pointers__()[0], layout["size"])
    fake_gpu.install(k)[1](x, 7, 2.5)
    params = fake_gpu.last.params
    # every field's bytes as CuTe packs them; the padding after an i32 field is launchpad's zeros,
    # CuTe's is what its allocation held (0xbe under AddressSanitizer)
    meaningful = [range(8)] + [range(off, off + width) for _, _, off, width in layout["fields"]]
    assert [params[0][i] for r in meaningful for i in r] == [theirs[i] for r in meaningful for i in r]
    assert len(params[0]) == len(theirs)
    padding = set(range(len(theirs))) - {i for r in meaningful for i in r}
    assert all(params[0][i] == 0 for i in padding)
    assert params[1:] == [struct.pack("<i", 7), struct.pack("<f", 2.5)]
    # the compiled executor packed the struct itself (OP_TILE_ARRAY), handing nothing to Python
    assert fallbacks == [] or fake_gpu.executor == "python"
    assert [p.name for p in k.params] == ["t", "s", "f"]
    assert k.spec.metadata["fields"]["t"][0] == "t"


def test_elementwise_add_bytes_and_launch(fake_gpu):
    fn, args = ck.examples()["add"]
    k = fake_gpu.install(lp.from_cute(fn, args, arch="sm_90"))
    a, b, c = torch.randn(16, 24), torch.randn(16, 24), torch.empty(16, 24)
    k[2](a, b, c)
    launch = fake_gpu.last
    assert (launch.grid, launch.block, launch.shared_mem) == ((2, 1, 1), (256, 1, 1), 0)
    assert launch.params == [q(t.data_ptr()) + struct.pack("<iiq", 16, 24, 24) for t in (a, b, c)]


def test_cluster_and_shared_memory_reach_the_launch(fake_gpu):
    fn, args = ck.examples()["cluster_scale"]
    k = fake_gpu.install(lp.from_cute(fn, args, arch="sm_90"))
    x, out = torch.randn(300), torch.empty(300)
    k[4](x, out, 300)
    launch = fake_gpu.last
    assert launch.ex["cluster"] == (2, 1, 1) and launch.block == (128, 1, 1)
    assert launch.params == [q(x.data_ptr()) + struct.pack("<ii", 300, 0), q(out.data_ptr()) + struct.pack("<ii", 300, 0),
                             struct.pack("<i", 300)]  # fmt: skip
    fn, args = ck.examples()["row_softmax"]
    k = fake_gpu.install(lp.from_cute(fn, args, arch="sm_90"))
    assert k.spec.plan.shared_mem == 16  # CuTe's SmemAllocator: 4 floats
    x = torch.randn(3, 50)
    k[3](x, torch.empty(3, 50))
    assert fake_gpu.last.shared_mem == 16


def test_an_array_a_stream_and_a_constexpr_tuple(fake_gpu, fallbacks):
    """A ``cutlass.Array`` parameter is its data pointer (a static layout: dtype, length, alignment
    checked as a static tensor's); the host function's ``stream`` is CuTe's, not a kernel parameter
    (launchpad launches on torch's stream); a ``Constexpr`` tuple is compiled in; the cluster and the
    shared memory of the ``cutlass.Array`` in shared memory reach the launch."""
    fn, args = ck.examples()["cluster_rotate"]
    k = fake_gpu.install(lp.from_cute(fn, args, arch="sm_90"))
    assert [(p.name, p.size) for p in k.params] == [("x", 16), ("out", 8)]
    assert k.spec.args[1].options["type"] == f'!cute.memref<f32, gmem, align<4>, "({ck.ROTATE_N}):(1)">'
    assert k.spec.args[2].kind == "const" and k.spec.args[2].value == [2, 1]
    x, out = torch.randn(ck.ROTATE_N), torch.empty(ck.ROTATE_N)
    k[4](x, out)
    k[4](x, out, (2, 1))  # the Constexpr may be given: equal to the compiled one
    with pytest.raises(ArgumentError, match="CLUSTER"):
        k[4](x, out, (1, 2))
    launch = fake_gpu.last
    assert launch.ex["cluster"] == (2, 1, 1) and (launch.block, launch.shared_mem) == ((128, 1, 1), 512)
    assert launch.params == [q(x.data_ptr()) + struct.pack("<ii", ck.ROTATE_N, 0), q(out.data_ptr())]
    for bad, error, words in [
        (torch.empty(ck.ROTATE_N - 1), ArgumentError, rf"shape\[0\] is {ck.ROTATE_N - 1} .*it is {ck.ROTATE_N}"),
        (torch.empty(ck.ROTATE_N, dtype=torch.float64), ArgumentTypeError, "expected float32 elements"),
        (torch.empty(2 * ck.ROTATE_N)[::2], ArgumentError, r"stride\[0\] is 2"),
    ]:
        with pytest.raises(error, match=words) as info:
            k[4](x, bad)
        assert "kernel 'cluster_rotate_kernel', argument 1 ('out')" in str(info.value)
    assert len(fake_gpu.launches) == 2 and fallbacks


def test_a_class_based_kernel_with_a_static_tiled_copy(fake_gpu, fallbacks):
    """An object whose ``__call__`` is the ``@cute.jit`` host function (CuTe's class-based kernels):
    the method's ``self`` is no parameter, a static ``TiledCopy`` holds no bytes at run time and is
    compiled in (left out; given, it is refused: its value is not kept)."""
    fn, args = ck.examples()["scaled"]
    k = fake_gpu.install(lp.from_cute(fn, args, arch="sm_90"))
    assert [(p.name, p.size) for p in k.params] == [("x", 16), ("y", 16)]
    assert [(a.name, a.kind) for a in k.spec.args] == [("x", "expand"), ("y", "expand"), ("tiled", "const")]
    assert k.spec.args[2].options["unknown"] and "TiledCopy" in k.spec.args[2].options["what"]
    x, y = torch.randn(300), torch.empty(300)
    k[3](x, y)
    assert fake_gpu.last.params == [q(t.data_ptr()) + struct.pack("<ii", 300, 0) for t in (x, y)]
    with pytest.raises(ArgumentError, match=r"argument 2 \('tiled'\).*not recorded"):
        k[3](x, y, object())
    assert len(fake_gpu.launches) == 1 and fallbacks


@pytest.mark.parametrize(
    "make_bad, position, error, words",
    [
        (lambda: torch.randn(8, 16, dtype=torch.float64), 0, ArgumentTypeError, "expected float32 elements"),
        (lambda: torch.randn(8, 12), 1, ArgumentError, r"shape\[1\] is 12; the kernel was compiled assuming it is a multiple of 8"),
        (lambda: torch.randn(8 * 16 + 1)[1:].view(8, 16), 2, ArgumentError, "is not 16-byte aligned"),
        (lambda: torch.randn(8, 32)[:, ::2], 0, ArgumentError, r"stride\[1\] is 2 .*it is 1 \(a static mode"),
        (lambda: torch.randn(8, 16, 1), 1, ArgumentError, "expected a 2-d tensor"),
        (lambda: 3.0, 2, ArgumentTypeError, "expected a torch tensor"),
    ],
)  # fmt: skip
def test_wrong_arguments_are_refused_naming_kernel_and_argument(fake_gpu, fallbacks, make_bad, position, error, words):
    fn, args = ck.examples()["add"]
    k = fake_gpu.install(lp.from_cute(fn, args, arch="sm_90"))
    good = [torch.randn(8, 16) for _ in range(3)]
    good[position] = make_bad()
    name = ["gA", "gB", "gC"][position]
    with pytest.raises(error, match=words) as info:
        k[1](*good)
    assert f"kernel 'add_kernel', argument {position} ('{name}')" in str(info.value)
    assert not fake_gpu.launches and fallbacks  # the compiled executor handed it on; the Python one refused it
    k[1](*[torch.randn(8, 16) for _ in range(3)])
    assert len(fake_gpu.launches) == 1


def test_a_bare_kernel_needs_its_block_and_a_fully_static_tensor_is_a_pointer(fake_gpu):
    t = from_dlpack(torch.randn(4, 8), assumed_align=16)  # static layout: (4,8):(8,1)
    with pytest.raises(ArgumentError, match="pass block="):
        lp.from_cute(probe.probe_kernel, (t, cutlass.Int32(0), cutlass.Float32(0)), arch="sm_90")
    k = fake_gpu.install(lp.from_cute(probe.probe_kernel, (t, cutlass.Int32(0), cutlass.Float32(0)), arch="sm_90",
                                      block=64))  # fmt: skip
    x = torch.randn(4, 8)
    k[3](x, 1, 0.5)
    assert fake_gpu.last.block == (64, 1, 1) and fake_gpu.last.params[0] == q(x.data_ptr())
    with pytest.raises(ArgumentError, match=r"shape\[0\] is 5 .*it is 4 \(a static mode"):
        k[3](torch.randn(5, 8), 1, 0.5)


def test_a_tiled_tensor_from_the_host_function_is_refused_by_name():
    t = from_dlpack(torch.randn(16, 32), assumed_align=16).mark_layout_dynamic()
    with pytest.raises(LaunchpadError, match=r"kernel 'tiled_kernel', parameter 'g'.*hierarchical"):
        lp.from_cute(probe.tiled, (t,), arch="sm_90")


def test_a_compiled_function_and_other_objects_are_refused():
    with pytest.raises(ArgumentTypeError, match=r"@cute\.jit or @cute\.kernel"):
        lp.from_cute(lambda x: x, (), arch="sm_90")


def test_an_unknown_release_is_refused(monkeypatch):
    monkeypatch.setattr(cutlass, "__version__", "4.9.0")
    fn, args = ck.examples()["add"]
    with pytest.raises(UnsupportedVersion, match=r"nvidia-cutlass-dsl 4\.9\.0 is installed"):
        lp.from_cute(fn, args, arch="sm_90")


def test_carried_artifacts_are_what_this_release_compiles():
    for name, (fn, args) in ck.examples().items():
        fresh = lp.from_cute(fn, args, arch="sm_90").spec
        carried = lp.load(CUBINS / f"{name}.json").spec
        assert (carried.name, carried.params, carried.args, carried.plan) == (fresh.name, fresh.params, fresh.args,
                                                                              fresh.plan), name  # fmt: skip


BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "cutlass" or name.startswith(("cutlass.", "nvidia_cutlass")):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import torch, launchpad as lp
from launchpad.launch.checks import CONVERTERS, Context
k = lp.load(sys.argv[1])
arg = k.spec.args[0]
x = torch.randn(8, 16)
convert = CONVERTERS[arg.converter].specialize(**arg.options)
(packed,) = convert(x, -1, 0, Context(k.spec.display_name, k.spec.params, k.spec.args), arg)
print(packed.hex(), x.data_ptr(), "cutlass" in sys.modules)
"""


def test_saved_kernel_loads_and_packs_without_cute_dsl():
    out = subprocess.run([sys.executable, "-c", BLOCKER, str(CUBINS / "add.json")], capture_output=True, text=True,
                         cwd=HERE.parent, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    packed, address, imported = out.stdout.split()
    assert bytes.fromhex(packed) == q(int(address)) + struct.pack("<iiq", 8, 16, 16) and imported == "False"
    assert json.loads((CUBINS / "add.json").read_text())["metadata"]["frontend"] == "cute"


def test_a_recorded_step_replays_with_new_tensors_in_the_struct(graphs):
    """In ``launchpad.record`` (the fake device's graphs): each replay's tensors reach the struct's
    pointer; its extents and strides stay the recorded ones."""
    fn, args = ck.examples()["add"]
    k = graphs.fake.install(lp.from_cute(fn, args, arch="sm_90"))
    seq = graphs.record(lambda a, b, c: k[2](a, b, c), *[torch.randn(16, 32) for _ in range(3)])
    a, b, c = (torch.randn(16, 32) for _ in range(3))
    seq(a, b, c)
    data = graphs.reads(seq, 0)
    assert data == b"".join(q(t.data_ptr()) + struct.pack("<iiq", 16, 32, 32) for t in (a, b, c))


def test_an_operator_schema_takes_its_tensors():
    """What torch.compile's operator of a CuTe kernel is made from: each tensor struct a Tensor."""
    fn, args = ck.examples()["cluster_scale"]
    k = lp.from_cute(fn, args, arch="sm_90")
    op = lp.torch_op("launchpad_cute_test::cluster_scale", k, grid=lambda x, out, n: (n + 127) // 128, mutates=("out",))
    assert "Tensor x, Tensor(a!) out, SymInt n" in str(op._schema)


def test_a_parameter_the_host_function_builds_is_refused_by_name():
    """A bare pointer (like a TMA atom, something CuTe's host code makes): no torch value packs it."""
    t = from_dlpack(torch.randn(16), assumed_align=16).mark_layout_dynamic()
    with pytest.raises(LaunchpadError, match=r"kernel 'pointer_kernel', parameter 'p' is a .*launchpad cannot build"):
        lp.from_cute(probe.pointer, (t,), arch="sm_90")
