"""Helion kernels through launchpad, on CPU.

Helion binds and generates its code without a GPU; the Triton kernels of its host functions are
compiled for sm_90 and launched through the real launch path on ``fake_gpu``, so every test sees
the exact bytes, grid and block that reach the driver. The specialization key is checked
against Helion's own ``Kernel._base_specialization_key`` over generated arguments.
"""

from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest
import torch

import launchpad
from launchpad.frontends.helion import keys as hkeys
from launchpad.frontends.helion import versions as hv
from launchpad.frontends.helion.frontend import HelionKernel
from launchpad.frontends.helion.launch import Launcher, refusals
from launchpad.frontends.triton import launcher as lpt

helion = pytest.importorskip("helion")
triton = pytest.importorskip("triton")
import helion.language as hl  # noqa: E402
import helion_kernels as H  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

SM90 = GPUTarget("cuda", 90, 32)
try:
    hv.check_installed()
    UNSUPPORTED = ""
except launchpad.UnsupportedVersion as exc:
    UNSUPPORTED = str(exc)
supported = pytest.mark.skipif(bool(UNSUPPORTED), reason=UNSUPPORTED)


pytestmark = pytest.mark.usefixtures("private_triton_cache")


class Env:
    """Helion kernels whose Triton kernels compile for sm_90 and launch on the fake GPU."""

    def __init__(self, fake_gpu, monkeypatch):
        self.fake = fake_gpu
        self.options: list[dict] = []  # the compile options of each Triton launcher asked for
        self.launchers: list = []
        real = lpt.Kernel
        monkeypatch.setattr(lpt, "Kernel", lambda spec: fake_gpu.install(real(spec)))

    def launcher_of(self, jit_fn):
        launcher = lpt.TritonLauncher(jit_fn, target=SM90)
        self.launchers.append(launcher)
        real = launcher.with_options

        def with_options(options):
            self.options.append(dict(options))
            return real(options)

        launcher.with_options = with_options
        return launcher

    def wrap(self, kernel) -> HelionKernel:
        return HelionKernel(kernel, self.launcher_of)

    def kernels(self) -> list:
        """Every launchpad Kernel compiled so far (one table per Triton function)."""
        return [k for launcher in self.launchers for k in launcher.kernels.values()]


@pytest.fixture
def env(fake_gpu, monkeypatch) -> Env:
    if UNSUPPORTED:
        pytest.skip(UNSUPPORTED)
    return Env(fake_gpu, monkeypatch)


def pointers(*tensors) -> list[bytes]:
    return [struct.pack("<Q", t.data_ptr()) for t in tensors]


def entry_of(hk, args) -> tuple:
    """``(bound, compiled, call)`` that ``hk(*args)`` runs: by launchpad's key, or (Helion 1.5, whose key
    is Helion's own binding) by the host function of the bound kernel Helion binds."""
    if hk._bind_per_call:
        return hk.host_functions[hk._settle(hk.kernel.bind(args), args)]
    entry = hk.host_functions[hk._key(args)]
    return entry.entries[tuple(f(args) for f in entry.extractors)] if hasattr(entry, "entries") else entry


BIND_PER_CALL = not UNSUPPORTED and hv.rules_of().bind_per_call
reproduced = pytest.mark.skipif(
    BIND_PER_CALL, reason="Helion 1.5: launchpad asks Helion's own bind, no copy of its key"
)


def configured(kernel, **config):
    """A copy of a Helion kernel with one config (no autotuning), as Helion's docs make them."""
    return helion.kernel(kernel.fn, config=helion.Config(**config), static_shapes=kernel.settings.static_shapes)


# --- the specialization key ----------------------------------------------------------------------


def _many(x, y, n: int, scale: float, flag: bool, dims: list[int], c: hl.constexpr):
    return x


def _tensor(kind: str):
    base = torch.arange(24, dtype=torch.float32)
    if kind == "meta-huge":  # more elements than an int32 index reaches: no memory on "meta"
        return torch.empty(2**31 + 8, device="meta")
    if kind == "meta8":
        return torch.empty(8, device="meta")
    t = {
        "v24": base,
        "v24h": base.half(),
        "v0": base[:0],
        "v1": base[:1],
        "v2": base[:2],
        "v3": base[:3],
        "m4x6": base.view(4, 6),
        "m4x6t": base.view(6, 4).t(),
        "m1x6": base[:6].view(1, 6),
        "meta4x6": torch.empty(4, 6, device="meta"),
        "param": torch.nn.Parameter(base.view(4, 6)),
    }[kind.removesuffix("-static")]
    if kind.endswith("-static"):
        t = t.view(t.shape)
        torch._dynamo.mark_static(t, 0)
    return t


TENSORS = ["v24", "v24h", "v0", "v1", "v2", "v3", "m4x6", "m4x6t", "m1x6", "meta4x6", "param", "m4x6-static",
           "meta-huge", "meta8"]  # fmt: skip
CHOICES = (
    TENSORS,
    [None, "v24", "m4x6", "m4x6t"],
    [1, 2, 2**40, "const3", 3.0],
    [0.5, 1.0, 2],
    [True, False, 1],
    [[1], [2, 3], [], (1,)],
    [1, 2, "a", 1.0, "const2"],
)
# calls that differ from one another in one or two arguments, so that keys often coincide
calls_near = st.tuples(*(st.sampled_from(c) for c in CHOICES)).flatmap(
    lambda base: st.lists(
        st.lists(st.integers(0, len(CHOICES) - 1).flatmap(lambda i: st.tuples(st.just(i), st.sampled_from(CHOICES[i]))),
                 max_size=2).map(lambda changes: tuple({**dict(enumerate(base)), **dict(changes)}.values())),
        min_size=2, max_size=12,
    )
)  # fmt: skip


def _materialize(spec: tuple) -> tuple:
    x, y, n, scale, flag, dims, c = spec
    n = hl.constexpr(3) if n == "const3" else n
    c = hl.constexpr(2) if c == "const2" else c
    return (_tensor(x), None if y is None else _tensor(y), n, scale, flag, dims, c)


def _same_partition(kernel, calls) -> None:
    key = launchpad.helion_kernel(kernel)._key
    args = [_materialize(c) for c in calls]
    ours = [key(a) for a in args]
    theirs = [kernel._base_specialization_key(a) for a in args]
    for i in range(len(args)):
        for j in range(len(args)):
            assert (ours[i] == ours[j]) == (theirs[i] == theirs[j]), (calls[i], calls[j])


SETTINGS = pytest.mark.parametrize(
    "static_shapes, index_dtype", [(True, None), (False, None), (False, torch.int64), (True, torch.int64)]
)


@reproduced
@supported
@SETTINGS
def test_key_partitions_calls_as_helion_does(static_shapes, index_dtype):
    """Two calls share launchpad's key exactly when they share Helion's base key: every value of
    each argument against every other, the rest fixed."""
    kernel = helion.kernel(_many, static_shapes=static_shapes, index_dtype=index_dtype, autotune_effort="none")
    base = ("m4x6", "v24", 2, 0.5, True, [1], 1)
    for i, choices in enumerate(CHOICES):
        _same_partition(kernel, [base[:i] + (c,) + base[i + 1 :] for c in choices])


@reproduced
@supported
@SETTINGS
@settings(max_examples=40, deadline=None)
@given(calls=calls_near)
def test_key_partitions_mixed_calls_as_helion_does(static_shapes, index_dtype, calls):
    kernel = helion.kernel(_many, static_shapes=static_shapes, index_dtype=index_dtype, autotune_effort="none")
    _same_partition(kernel, calls)


@reproduced
@supported
@SETTINGS
def test_a_constexpr_never_keys_as_a_tensor(static_shapes, index_dtype):
    """A constexpr keys as its value: one equal to what a tensor's entry holds (launchpad's
    fields, or Helion's own entry, which Helion itself confuses with the tensor) still keys apart
    from the tensor, so no host function is shared that Helion would not share."""
    kernel = helion.kernel(_many, static_shapes=static_shapes, index_dtype=index_dtype, autotune_effort="none")
    key = launchpad.helion_kernel(kernel)._key
    # y a tensor: from 1.2 Helion looks for the call's device past a constexpr x, and fails on a
    # list of ints ([1]) it meets before any tensor (a TypeError from Helion's own key)
    a = (_tensor("v24"), _tensor("v24"), 1, 0.5, True, [1], 2)
    head = getattr(hkeys, "_TENSOR", object())
    fields = tuple(f for f in key(a)[0] if f is not head)  # what the entry holds besides its private head
    for like in (fields, kernel._base_specialization_key(a)[0]):
        b = (hl.constexpr(like), *a[1:])
        assert key(a) != key(b)


def _devices(a, b, c):
    return b


@reproduced
@supported
@pytest.mark.parametrize("static_shapes", [True, False])
def test_the_calls_device_is_keyed_as_helion_keys_it(static_shapes):
    """The device entries (1.0: in each tensor's; 1.1: the first tensor argument's; from 1.2 what
    Helion's _find_device finds, in containers and torch.device arguments too): two calls share
    launchpad's key exactly when they share Helion's, and a call Helion's key refuses (its device
    search meeting a list of ints first, from 1.2) is refused alike."""
    kernel = helion.kernel(_devices, static_shapes=static_shapes, autotune_effort="none")
    key = launchpad.helion_kernel(kernel)._key
    cpu, meta = torch.zeros(4), torch.empty(4, device="meta")
    firsts = [cpu, meta, torch.device("cpu"), torch.device("meta"), [cpu], [meta], {"k": meta}, (1.0, meta), [2],
              None, hl.constexpr(3)]  # fmt: skip
    calls = [(a, b, c) for a in firsts for b in (cpu, meta, None) for c in (cpu, meta, 3)]

    def both(args):
        try:
            theirs = kernel._base_specialization_key(args)
        except TypeError:
            with pytest.raises(TypeError):
                key(args)
            return "refused", "refused"
        return key(args), theirs

    keys = [both(args) for args in calls]
    for i, (ours_i, theirs_i) in enumerate(keys):
        for j, (ours_j, theirs_j) in enumerate(keys):
            assert (ours_i == ours_j) == (theirs_i == theirs_j), (calls[i], calls[j])


@reproduced
@supported
def test_a_distributed_call_keys_apart_from_1_4(tmp_path):
    """Helion 1.4 keys whether a call is distributed: inside an initialized torch.distributed, a
    kernel with distributed=True keys apart from the same call outside it, as in Helion's key."""
    import torch.distributed as dist

    if hv.rules_of().distributed is False:
        pytest.skip(f"Helion {hv.installed_version()} does not key on distributed calls")
    kernel = helion.kernel(_devices, autotune_effort="none", distributed=True)
    key = launchpad.helion_kernel(kernel)._key
    args = (torch.zeros(4), None, 3)
    outside = (key(args), kernel._base_specialization_key(args))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        inside = (key(args), kernel._base_specialization_key(args))
    finally:
        dist.destroy_process_group()
    assert inside[0] != outside[0] and inside[1] != outside[1] and inside[1][-1] is True
    assert key(args) == outside[0]


@reproduced
@supported
def test_key_ends_with_the_kernels_key_function():
    kernel = helion.kernel(_many, key=lambda *args: len(args[5]), autotune_effort="none")
    key = launchpad.helion_kernel(kernel)._key
    a = (_tensor("v24"), None, 1, 0.5, True, [1], 2)
    b = (_tensor("v24"), None, 1, 0.5, True, [7], 2)
    c = (_tensor("v24"), None, 1, 0.5, True, [1, 2], 2)
    assert key(a)[-1] == 1 and key(c)[-1] == 2
    assert [key(a) == key(b), key(a) == key(c)] == [True, False]
    assert kernel._base_specialization_key(a) == kernel._base_specialization_key(b)
    assert kernel._base_specialization_key(a) != kernel._base_specialization_key(c)


# --- launches ------------------------------------------------------------------------------------


def test_add_launches_helions_kernel_with_its_config(env):
    add = configured(H.add, block_sizes=[256], num_warps=2, num_stages=3)
    hk = env.wrap(add)
    x, y = torch.randn(4096), torch.randn(4096)
    out = hk(x, y)
    assert out.shape == (4096,) and out.dtype == torch.float32
    last = env.fake.last
    assert last.grid == (16, 1, 1) and last.block == (64, 1, 1)  # 4096 / 256 blocks of num_warps=2 warps
    assert last.params[:3] == pointers(x, y, out)
    assert env.options == [{"num_warps": 2, "num_stages": 3}]
    (kernel,) = env.kernels()
    assert kernel.spec.metadata["num_stages"] == 3 and kernel.spec.metadata["num_warps"] == 2
    # the bound kernel and host function Helion itself runs for these arguments
    bound, compiled, _ = entry_of(hk, (x, y))
    assert bound is add.bind((x, y)) and compiled is bound._run
    out2 = hk(x, y)
    assert len(env.fake.launches) == 2 and len(env.kernels()) == 1
    assert env.fake.last.params[:3] == pointers(x, y, out2) and out2.data_ptr() != x.data_ptr()


def test_calls_helion_specializes_differently_never_share_a_host_function(env):
    """Interleaved calls: each runs the host function of Helion's own bound kernel for its arguments
    (static shapes: the size is in the generated grid; dtype and strides in the kernel)."""
    add = helion.kernel(H.add.fn, autotune_effort="none")  # Helion's default config for each
    hk = env.wrap(add)
    base = torch.randn(64, 64)
    calls = [
        (torch.randn(4096), torch.randn(4096)),
        (torch.randn(1000), torch.randn(1000)),
        (torch.randn(4096).half(), torch.randn(4096).half()),
        (base, base),
        (base.t(), base),  # other strides
        (torch.randn(4096), torch.randn(1)),  # broadcast
    ]
    grids = {}
    for args in calls + calls[::-1] + calls:
        out = hk(*args)
        torch.testing.assert_close(out.shape, torch.broadcast_shapes(args[0].shape, args[1].shape))
        bound, compiled, _ = entry_of(hk, args)
        assert bound is add.bind(args) and compiled is bound._run
        grids.setdefault(id(bound), env.fake.last.grid)
        assert env.fake.last.grid == grids[id(bound)]
        x, y = torch.broadcast_tensors(*args)
        assert env.fake.last.params[:3] == pointers(x, y, out)
    assert len(hk.host_functions) == len({id(add.bind(a)) for a in calls}) == len(calls)


def test_hl_specialize_keys_on_the_specialized_size(env):
    """row_mean: dynamic shapes, its row length specialized: rows of 128 share one host function
    (1/128 baked in) whatever their count; rows of 96 get another."""
    hk = env.wrap(H.row_mean)
    a, b, c = torch.randn(64, 128), torch.randn(32, 128), torch.randn(64, 96)
    for x in (a, b, c, a, c, b):
        out = hk(x)
        if BIND_PER_CALL:
            bound, compiled, _ = entry_of(hk, (x,))
        else:
            bound, compiled, _ = hk.host_functions[hk._key((x,))].entries[(x.shape[1],)]
        assert bound is H.row_mean.bind((x,))
        source = open(compiled.__globals__["__file__"]).read()
        assert repr(1.0 / x.shape[1]) in source
        assert env.fake.last.params[:2] == pointers(x, out)
        assert struct.pack("<i", x.shape[0]) in env.fake.last.params[2:]  # the row count is an argument
    if BIND_PER_CALL:  # one host function per bound kernel Helion binds
        assert len({id(e[0]) for e in hk.host_functions.values()}) == 2
    else:
        (slot,) = hk.host_functions.values()
        assert sorted(slot.entries) == [(96,), (128,)]


def test_constexpr_defaults_and_keywords(env):
    hk = env.wrap(H.scale_by)
    x = torch.randn(100)
    hk(x, 3)
    assert env.fake.last.params[2] == struct.pack("<f", 0.0)  # bias: its default
    hk(x, 3, 0.5)
    assert env.fake.last.params[2] == struct.pack("<f", 0.5)
    hk(x, factor=3, bias=-1.25)
    assert env.fake.last.params[2] == struct.pack("<f", -1.25)
    hk(x, hl.constexpr(3), 2.0)
    hk(x, 4)
    sources = {open(e[1].__globals__["__file__"]).read() for e in hk.host_functions.values()}
    assert len(sources) == 2  # factor 3 and factor 4, each compiled in
    for args in [(x, 3), (x, 3, 0.5), (x, hl.constexpr(3), 2.0), (x, 4)]:
        assert entry_of(hk, args)[0] is H.scale_by.bind(args)
    with pytest.raises(launchpad.ArgumentTypeError, match=r"^Helion kernel 'scale_by': Too many arguments"):
        hk(x, 3, 0.5, 1)  # also a TypeError, as Helion's own refusal is


def test_arguments_helion_cannot_take_are_named(env):
    hk = env.wrap(H.scale_by)
    x = torch.randn(100)
    with pytest.raises(
        launchpad.ArgumentTypeError,
        match=r"^Helion kernel 'scale_by', argument 'bias': Helion cannot take float32 \(unsupported argument type",
    ):
        hk(x, 3, np.float32(1.0))
    with pytest.raises(launchpad.ArgumentTypeError, match=r"^Helion kernel 'scale_by': missing a required argument"):
        hk(x, bias=1.0)
    assert env.fake.launches == []


def test_reset_forgets_the_launchers_too(env):
    hk = env.wrap(H.scale_by)
    hk(torch.randn(100), 3)
    assert hk._launcher._last and hk._launcher._runs
    hk.reset()
    assert hk.host_functions == {} and hk._launcher._last == {} and hk._launcher._runs == {}


def test_matmul_epilogue_functions_are_keyed_as_helion_keys_them(env):
    matmul = configured(H.matmul, block_sizes=[32, 32, 32], num_warps=4, num_stages=2)
    hk = env.wrap(matmul)
    x, y, bias = torch.randn(64, 64).half(), torch.randn(64, 64).half(), torch.randn(64).half()
    out = hk(x, y)
    assert out.shape == (64, 64) and env.fake.last.params[:3] == pointers(x, y, out)
    hk(x, y, lambda acc, tile: torch.relu(acc + bias[tile[1]]))
    assert len(hk.host_functions) == 2 and len(env.fake.last.params) > 3 + 2  # the bias is an argument now
    assert env.fake.last.params[3] == struct.pack("<Q", bias.data_ptr()) or pointers(bias)[0] in env.fake.last.params
    hk(x, y)
    assert len(env.fake.last.params) == 3 + 2


@pytest.mark.parametrize("name", ["softmax", "softmax_online", "layer_norm", "layer_norm_no_bias", "attention"])
def test_the_gpu_tests_kernels_compile_and_launch_their_outputs(env, name):
    """Each kernel the GPU tests run, with Helion's default config: bound, generated, compiled for
    sm_90 and launched, its outputs the tensors the launch writes."""
    half = torch.float16
    kernel, args = {
        "softmax": (H.softmax, (torch.randn(64, 256).to(half),)),
        "softmax_online": (H.softmax_online, (torch.randn(64, 256).to(half),)),
        "layer_norm": (H.layer_norm, (torch.randn(32, 512).to(half), torch.randn(512).to(half),
                                      torch.randn(512).to(half), 1e-4)),
        "layer_norm_no_bias": (H.layer_norm, (torch.randn(32, 512).to(half), torch.randn(512).to(half), None, 1e-4)),
        "attention": (H.attention, tuple(torch.randn(2, 2, 128, 64).to(half) for _ in range(3))),
    }[name]  # fmt: skip
    keep = {k: getattr(kernel.settings, k) for k in ("static_shapes", "dot_precision")}
    hk = env.wrap(helion.kernel(kernel.fn, **keep, autotune_effort="none"))
    outs = hk(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    written = set(env.fake.last.params)
    for out in outs:
        assert struct.pack("<Q", out.data_ptr()) in written
    assert outs[0].shape == args[0].shape and outs[0].dtype == half
    assert env.fake.last.block[0] == 32 * env.options[-1]["num_warps"]


def test_a_grid_barrier_launches_a_cooperative_grid(env, monkeypatch):
    """split_k_barrier: hl.barrier() makes Helion launch with launch_cooperative_grid=True, a
    Triton compile option whose metadata launchpad launches as a cooperative grid."""
    import helion.runtime

    monkeypatch.setattr(helion.runtime, "get_num_sm", lambda device, **_: 132)  # an H100's, on CPU
    hk = env.wrap(configured(H.split_k_matmul, block_sizes=[16, 16, 16, 1, 1], num_warps=4, num_stages=1,
                             pid_type="persistent_blocked", splits=64))  # fmt: skip
    a, b = torch.randn(64, 1024), torch.randn(1024, 64)
    out = hk(a, b)
    assert env.options == [{"num_warps": 4, "num_stages": 1, "launch_cooperative_grid": True}]
    assert env.fake.last.ex["cooperative"] is True and env.fake.last.grid == (132, 1, 1)
    assert env.fake.last.params[3] == pointers(out)[0]


def test_a_config_helion_autotunes_to_is_the_one_launched(env, monkeypatch):
    """configs=[...] autotunes on the first call (Helion's autotuner, faked here: it needs a GPU to
    time); the config it settles on compiles, and a later set_config is followed."""
    from helion.runtime.kernel import BoundKernel

    small = helion.Config(block_sizes=[64], num_warps=2, num_stages=1)
    big = helion.Config(block_sizes=[512], num_warps=8, num_stages=2)
    tuned = []

    def autotune(self, args, *, force=True, **kwargs):
        tuned.append(force)
        self.set_config(big)
        return big

    monkeypatch.setattr(BoundKernel, "autotune", autotune)
    add = helion.kernel(H.add.fn, configs=[small, big])
    hk = env.wrap(add)
    x, y = torch.randn(4096), torch.randn(4096)
    hk(x, y)
    assert tuned == [False] and env.fake.last.block == (256, 1, 1) and env.fake.last.grid == (8, 1, 1)
    hk(x, y)
    assert tuned == [False]  # tuned once per specialization, as Helion does
    add.bind((x, y)).set_config(small)
    hk(x, y)
    assert env.fake.last.block == (64, 1, 1) and env.fake.last.grid == (64, 1, 1)


def test_threads_launch_their_own_arguments(env):
    hk = env.wrap(configured(H.add, block_sizes=[128], num_warps=4, num_stages=1))
    inputs = [(torch.randn(n), torch.randn(n)) for n in (512, 1024, 2048, 4096)]
    hk(*inputs[0])
    errors = []

    def work(args):
        try:
            for _ in range(20):
                out = hk(*args)
                assert out.shape == args[0].shape
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(a,)) for a in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    by_x = {struct.unpack("<Q", launch.params[0])[0]: launch.grid for launch in env.fake.launches}
    assert {by_x[x.data_ptr()] for x, _ in inputs} == {(4, 1, 1), (8, 1, 1), (16, 1, 1), (32, 1, 1)}


def test_threads_never_trace_or_compile_two_helion_kernels_at_once(env, monkeypatch):
    """Helion's tracing writes torch.fx's process-wide node metadata: two threads tracing at once,
    even two kernels, lost a node's source location (KeyError 'location', seen in CI). Each trace
    (a new bound kernel) and each code generation is held open here, so any overlap is seen."""
    from helion.runtime.kernel import BoundKernel

    active, overlaps, lock = [0], [], threading.Lock()

    def held(real):
        def run(*args, **kwargs):
            with lock:
                active[0] += 1
                overlaps.append(active[0])
            try:
                time.sleep(0.02)  # long enough for a thread waiting at the barrier to arrive
                return real(*args, **kwargs)
            finally:
                with lock:
                    active[0] -= 1

        return run

    monkeypatch.setattr(BoundKernel, "__init__", held(BoundKernel.__init__))
    monkeypatch.setattr(BoundKernel, "ensure_config_exists", held(BoundKernel.ensure_config_exists))
    wrappers = [
        env.wrap(configured(H.add, block_sizes=[128], num_warps=4, num_stages=1)),
        env.wrap(configured(H.add, block_sizes=[64], num_warps=2, num_stages=1)),
    ]
    rng = np.random.default_rng(7)
    work = [(hk, int(n)) for hk in wrappers for n in rng.choice(np.arange(1, 64) * 64, 3, replace=False)]
    barrier, errors, results = threading.Barrier(len(work)), [], {}

    def call(i: int) -> None:
        hk, n = work[i]
        x, y = torch.randn(n), torch.randn(n)
        barrier.wait()
        try:
            results[i] = (hk(x, y), x, y)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(overlaps) >= len(work) and max(overlaps) == 1  # every trace and compile alone
    # the fake GPU writes nothing: each call's launch is checked by the pointers that reached it
    launched = {struct.unpack("<QQQ", b"".join(launch.params[:3])) for launch in env.fake.launches}
    assert {(x.data_ptr(), y.data_ptr(), out.data_ptr()) for out, x, y in results.values()} <= launched


def test_calls_bound_already_go_on_while_another_thread_compiles(env, monkeypatch):
    """One thread's compile holds the lock (autotuning may take minutes); another thread's call of a
    kernel bound already binds and launches meanwhile, and a new key waits: Helion traces it (a new
    bound kernel) only under launchpad's lock, after the compile."""
    from helion.runtime.kernel import BoundKernel

    from launchpad.frontends.helion import frontend

    hot = env.wrap(configured(H.add, block_sizes=[128], num_warps=4, num_stages=1))
    cold = env.wrap(configured(H.add, block_sizes=[64], num_warps=2, num_stages=1))
    x, y = torch.randn(512), torch.randn(512)
    hot(x, y)
    entered, release, real = threading.Event(), threading.Event(), BoundKernel.ensure_config_exists
    real_init, traced_unlocked = BoundKernel.__init__, []

    def held(self, *args, **kwargs):
        entered.set()
        release.wait(30)
        return real(self, *args, **kwargs)

    def init(self, *args, **kwargs):
        traced_unlocked.append(not frontend._HELION_LOCK._is_owned())
        return real_init(self, *args, **kwargs)

    monkeypatch.setattr(BoundKernel, "ensure_config_exists", held)
    monkeypatch.setattr(BoundKernel, "__init__", init)
    outcomes: list[str] = []

    def call(name: str, hk, a, b) -> None:
        hk(a, b)
        outcomes.append(name)

    threads = [threading.Thread(target=cold, args=(torch.randn(256), torch.randn(256)), daemon=True),
               threading.Thread(target=call, args=("warm", hot, x, y), daemon=True),
               threading.Thread(target=call, args=("new", hot, x.double(), y.double()), daemon=True)]  # fmt: skip
    try:
        threads[0].start()
        assert entered.wait(30)  # the compile holds the lock
        threads[1].start(), threads[2].start()
        threads[1].join(10)
        assert outcomes == ["warm"]  # launched meanwhile; the new key (float64) waits
        assert struct.unpack("<Q", env.fake.last.params[0])[0] == x.data_ptr()
    finally:
        release.set()
        for t in threads:
            t.join(30)
    assert outcomes == ["warm", "new"] and not any(t.is_alive() for t in threads)
    assert traced_unlocked == [False, False]  # the cold and the float64 keys: each traced under the lock


def test_other_launcher_keywords_are_triton_compile_options(env):
    """What a config adds to the generated call (maxnreg, ptx_options of an advanced-controls
    file...) compiles into the kernel, as Helion's launcher passes it to JITFunction.run."""
    hk = env.wrap(configured(H.add, block_sizes=[128], num_warps=4, num_stages=1))
    x, y = torch.randn(256), torch.randn(256)
    hk(x, y)
    jit = next(iter(hk.host_functions.values()))[1].__globals__["_helion_add"]
    out = torch.empty(256)
    hk._launcher.launch(jit, (2,), x, y, out, num_warps=2, num_stages=1, maxnreg=128, ptx_options="--verbose")
    assert env.options[-1] == {"num_warps": 2, "num_stages": 1, "maxnreg": 128, "ptx_options": "--verbose"}
    kernel = next(k for k in env.kernels() if k.spec.metadata["num_warps"] == 2)
    assert kernel.spec.metadata["maxnreg"] == 128 and kernel.spec.metadata["ptx_options"] == "--verbose"
    assert env.fake.last.block == (64, 1, 1) and env.fake.last.params[:3] == pointers(x, y, out)


def test_under_torch_compile_it_is_traced_as_the_helion_kernel(env):
    """While Dynamo traces, a HelionKernel calls the Helion kernel itself: fullgraph=True gives the
    graph the Helion kernel gives (one Helion op where torch lets Helion register it: Helion's
    supports_torch_compile_fusion), or the same refusal where it does not, and no launchpad launch."""
    from helion._compat import supports_torch_compile_fusion

    add = configured(H.add, block_sizes=[64], num_warps=4, num_stages=1)
    hk = env.wrap(add)
    outcomes = {}

    def capture(name):
        def backend(gm, example_inputs):
            outcomes[name] = [(n.op, str(n.target)) for n in gm.graph.nodes]
            raise RuntimeError("captured, not run")  # running it needs a GPU

        return backend

    x, y = torch.randn(64), torch.randn(64)
    for name, fn in (("helion", add), ("launchpad", hk)):
        torch._dynamo.reset()
        compiled = torch.compile(lambda a, b, fn=fn: fn(a, b) * 2, backend=capture(name), fullgraph=True)
        with pytest.raises(Exception) as caught:
            compiled(x, y)
        if name not in outcomes:  # refused while tracing, before any graph reached the backend
            outcomes[name] = type(caught.value)
    torch._dynamo.reset()
    assert outcomes["launchpad"] == outcomes["helion"]
    if supports_torch_compile_fusion():  # torch 2.13 here; the GPU machine's 2.11 is refused alike
        assert any("helion" in target for _, target in outcomes["helion"])  # Helion's own op
    assert env.fake.launches == [] and hk.host_functions == {}


ALIASING = ["apart", "same", "view", "clone"]


def _aliased(shape: tuple, dtype: torch.dtype, how: str) -> tuple:
    x = torch.randn(shape).to(dtype)
    y = {"apart": lambda: torch.randn(shape).to(dtype), "same": lambda: x, "view": lambda: x.view(shape),
         "clone": lambda: x.clone()}[how]()  # fmt: skip
    return x, y


ADD_DEFAULT = helion.kernel(H.add.fn, autotune_effort="none")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(st.tuples(st.sampled_from([(64,), (8, 8)]), st.sampled_from([torch.float32, torch.float16]),
                                st.sampled_from(ALIASING)), min_size=1, max_size=6))  # fmt: skip
def test_each_call_runs_the_bound_kernel_helion_binds_aliased_inputs_too(env, calls):
    """Random calls, one tensor passed twice among them (Helion 1.5 keys input-tensor aliasing):
    each runs the host function of the bound kernel Helion binds for it, on its own tensors."""
    hk = env.wrap(ADD_DEFAULT)
    for shape, dtype, how in calls:
        x, y = _aliased(shape, dtype, how)
        out = hk(x, y)
        assert entry_of(hk, (x, y))[0] is ADD_DEFAULT.bind((x, y))
        assert env.fake.last.params[:3] == pointers(x, y, out)
    same, apart = _aliased((64,), torch.float32, "same"), _aliased((64,), torch.float32, "clone")
    helion_keys_aliasing = ADD_DEFAULT.bind(same) is not ADD_DEFAULT.bind(apart)
    assert helion_keys_aliasing == BIND_PER_CALL  # 1.5 only, which launchpad asks rather than copies
    hk(*same), hk(*apart)
    assert (entry_of(hk, same)[0] is entry_of(hk, apart)[0]) is not helion_keys_aliasing


# --- refusals ------------------------------------------------------------------------------------


def test_helion_runtime_arguments_and_unknown_options_are_refused_by_name(env, tmp_path):
    launcher = Launcher(env.launcher_of, "allgather")
    jit = H.add  # any object stands for the Triton kernel: refused before it is looked at
    with pytest.raises(launchpad.ArgumentError, match=r"^Helion kernel 'allgather': its host function launches \w+ "
                       r"with options launchpad cannot honour: _remote_copy_signal_dst= is a Helion runtime argument"):  # fmt: skip
        launcher.launch(jit, (1,), torch.zeros(4), num_warps=4, num_stages=1, _remote_copy_signal_dst=torch.zeros(1))
    with pytest.raises(launchpad.ArgumentError, match=r"waves_per_eu= is no compile option of the installed Triton"):
        launcher.launch(jit, (1,), torch.zeros(4), num_warps=4, num_stages=1, waves_per_eu=2)
    assert env.fake.launches == [] and env.options == []
    # the same refusal from the generated source, before its host code runs
    module = tmp_path / "generated.py"
    module.write_text(
        "def k(x, *, _launcher=None):\n"
        "    _launcher(_helion_k, (1,), x, num_warps=4, num_stages=1, _persistent_state_specs=())\n"
    )
    namespace: dict = {"__file__": str(module)}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    with pytest.raises(launchpad.ArgumentError, match=r"'k': .*launches _helion_k .*_persistent_state_specs="):
        refusals(namespace["k"], "k")
    refusals(H.add.fn, "add")  # a module without _launcher calls: nothing to refuse


def test_helion_1_5_resident_programs_check_is_refused_by_name(env, tmp_path):
    """Helion 1.5's _minimum_resident_programs= (cross-loop scheduling) asks its launcher to check
    the kernel's occupancy before launching: refused, naming the kernel and the keyword."""
    launcher = Launcher(env.launcher_of, "fused")
    why = r"_minimum_resident_programs= is a Helion runtime argument: its default launcher compiles the kernel"
    with pytest.raises(launchpad.ArgumentError, match=rf"^Helion kernel 'fused': .*{why}"):
        launcher.launch(H.add, (132,), torch.zeros(4), num_warps=4, num_stages=1, _minimum_resident_programs=132)
    module = tmp_path / "generated15.py"
    module.write_text("def k(x, *, _launcher=None):\n"
                      "    _launcher(_helion_k, (8,), x, _minimum_resident_programs=8, num_warps=4, num_stages=1)\n")  # fmt: skip
    namespace: dict = {"__file__": str(module)}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    with pytest.raises(launchpad.ArgumentError, match=rf"^Helion kernel 'k': .*launches _helion_k .*{why}"):
        refusals(namespace["k"], "k")
    assert env.fake.launches == [] and env.options == []


def test_ref_mode_and_other_backends_are_refused(env, monkeypatch):
    from helion.runtime.ref_mode import RefMode

    x = torch.randn(64)
    eager = helion.kernel(H.add.fn, ref_mode=RefMode.EAGER, autotune_effort="none")
    with pytest.raises(launchpad.ArgumentError, match=r"^Helion kernel 'add' is in ref mode"):
        env.wrap(eager)(x, x)
    add = configured(H.add, block_sizes=[64], num_warps=4, num_stages=1)
    bound = add.bind((x, x))
    monkeypatch.setattr(type(bound.env.backend), "name", property(lambda self: "pallas"))
    with pytest.raises(launchpad.ArgumentError, match=r"generates code for the 'pallas' backend"):
        env.wrap(add)(x, x)
    assert env.fake.launches == []


def test_unsupported_helion_versions_and_objects_are_refused(monkeypatch):
    followed = r"follows helion 1\.0, 1\.1, 1\.2, 1\.4 and 1\.5, .*\(pip install 'helion>=1\.0,<1\.6'\)$"
    for version in ("1.3.0", "1.6.0", "0.3.3", "2.0.0", "main"):
        with pytest.raises(launchpad.UnsupportedVersion, match=rf"^Helion {version} is installed; launchpad's Helion "
                           rf"front end {followed}"):  # fmt: skip
            hv.check_installed(version)
    for version in ("1.0.0", "1.0.3", "1.1.0", "1.2.0", "1.4.0", "1.4.2", "1.5.0", "1.5.1"):
        assert hv.check_installed(version) == version
    assert hv.rules_of("1.1.0").device_entry == "first_tensor" and hv.rules_of("1.4.0").distributed
    assert hv.rules_of("1.5.1").bind_per_call and not hv.rules_of("1.4.0").bind_per_call
    monkeypatch.setattr(hv, "installed_version", lambda: None)
    with pytest.raises(
        launchpad.UnsupportedVersion,
        match=r"Helion is not installed.*helion>=1\.0,<1\.6': the helion extra of launchpad-kernels",
    ):
        launchpad.helion_kernel(H.add)
    monkeypatch.setattr(hv, "installed_version", lambda: "1.6.0")
    with pytest.raises(launchpad.UnsupportedVersion, match=r"^Helion 1\.6\.0 is installed"):
        launchpad.helion_kernel(H.add)
    monkeypatch.setattr(hv, "installed_version", lambda: "1.0.0")
    with pytest.raises(
        launchpad.ArgumentError, match=r"needs a @helion.kernel function \(helion.Kernel\), got 'add' \(function\)"
    ):
        launchpad.helion_kernel(H.add.fn)


def test_the_extra_installs_the_followed_releases():
    """pyproject's helion extra and the refusal's pip command name one range: the followed releases."""
    import importlib.metadata
    import pathlib
    import re

    pyproject = pathlib.Path(__file__).parents[1] / "pyproject.toml"
    if pyproject.is_file():  # a source tree
        (spec,) = re.findall(r'^helion = \["helion(.*?)"\]', pyproject.read_text(), re.M)
    else:  # the installed wheel, tested from outside the tree: its metadata's requirement
        (spec,) = [re.sub(r"\s", "", r.split(";")[0])[len("helion"):]
                   for r in importlib.metadata.requires("launchpad-kernels") or ()
                   if r.startswith("helion") and 'extra == "helion"' in r]  # fmt: skip
        spec = ",".join(sorted(spec.split(","), key=lambda part: part[0] != ">"))
    assert spec == ">=1.0,<1.6" and spec in hv._PIP
    assert hv.SUPPORTED == ((1, 0), (1, 5)) and (1, 3) not in hv.RELEASES  # 1.3 was never released


def test_public_name_wires_the_triton_launcher():
    if UNSUPPORTED:
        pytest.skip(UNSUPPORTED)
    hk = launchpad.helion_kernel(H.add)
    assert isinstance(hk, launchpad.HelionKernel) and hk.kernel is H.add and hk.__name__ == "add"
    assert hk._launcher._launcher_of is launchpad.triton_launcher
    assert repr(hk) == "<launchpad.HelionKernel add (0 specializations)>"


def test_info_names_the_helion_and_whether_it_is_followed():
    from launchpad import cli

    assert cli._helion_note("1.0.0") == " (launchpad.helion_kernel)"
    assert cli._helion_note("1.4.0") == " (launchpad.helion_kernel)"
    assert cli._helion_note("1.5.1") == " (launchpad.helion_kernel)"
    assert cli._helion_note("1.6.0") == (
        " (launchpad.helion_kernel refuses it: it follows helion 1.0, 1.1, 1.2, 1.4 and 1.5)"
    )
