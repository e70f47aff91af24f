"""Recorded sequences with nodes launchpad did not make (torch's kernels, cuBLAS, copies), copies of
what no node can be re-pointed for, and outputs, on the fake GPU (``tests/fake_graphs.py``).

The foreign kernels here are laid out as the driver shows torch's (measured on an H100, see
the graph-updates experiment's survey (``benchmarks/experiments/graph_updates.py`` at f9f7baf, since removed)): an elementwise kernel's pointers inside a
16-byte ``Array<char*, 2>``, a reduction's inside a 1,048-byte ``ReduceOp``, cuBLAS's inside a
736-byte struct.
"""

from __future__ import annotations

import struct

import pytest
import torch
from fake_graphs import FakeCopyParams

import launchpad as lp

SOURCE = r"""
extern "C" __global__ void scale(float* out, const float* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = s * x[i];
}
"""
N = 64


@pytest.fixture(scope="module")
def module():
    return lp.compile_cuda_module(SOURCE, ["scale"], arch="sm_90")


def f32(n: int = N, value: float = 1.0) -> torch.Tensor:
    return torch.full((n,), value)


def relu(graphs, out, x):
    """torch.relu as the driver shows it: (int n, OffsetCalculator, Array<char*, 2> {out, x})."""
    graphs.foreign("at::native::vectorized_elementwise_kernel<4, relu>", (4, struct.pack("<i", N)), (24, bytes(24)),
                   (16, struct.pack("<QQ", out.data_ptr(), x.data_ptr())))  # fmt: skip


def test_torch_kernels_copies_and_reductions_follow_new_inputs(module, graphs):
    scale = graphs.fake.install(module["scale"])
    reduced = torch.empty(1)

    def step(x, y, alpha):
        h = graphs.pool(torch.empty(N))
        relu(graphs, h, x)  # node 0: x inside an array of pointers
        config = bytearray(1048)
        config[984:992] = struct.pack("<Q", x.data_ptr())
        config[760:768] = struct.pack("<Q", reduced.data_ptr())
        graphs.foreign("at::native::reduce_kernel<512, 1, ReduceOp<sum>>", (1048, bytes(config)))  # node 1
        graphs.foreign("at::native::add_kernel", (4, struct.pack("<f", alpha)), (8, y.data_ptr()))  # node 2: alpha, y
        tmp = graphs.pool(torch.empty(N))
        graphs.node("memcpy", addresses=(y.data_ptr(), tmp.data_ptr()), params=FakeCopyParams((y.data_ptr(),
                                                                                               tmp.data_ptr())))  # fmt: skip
        scale[1, N](h, tmp, 2.0, N)  # node 4

    seq = graphs.record(step, f32(), f32(), 0.5)
    x2, y2 = f32(), f32()
    seq(x2, y2, alpha=-3.25)
    assert graphs.words(seq, 0)[5] == x2.data_ptr()  # the array's second pointer
    assert graphs.words(seq, 1)[123] == x2.data_ptr() and graphs.words(seq, 1)[95] == reduced.data_ptr()
    assert graphs.reads(seq, 2)[:4] == struct.pack("<f", -3.25) and graphs.words(seq, 2)[1] == y2.data_ptr()
    assert graphs.reads(seq, 3)[48:56] == struct.pack("<Q", y2.data_ptr())  # the copy's source
    text = seq.explain()
    assert "input 'x': written into 2 place(s)" in text and "copied" not in text


def test_an_input_no_node_can_follow_is_copied_in_and_back(module, graphs):
    scale = graphs.fake.install(module["scale"])

    def step(x, out):
        # a kernel that holds x's address in a form launchpad cannot re-point (a TMA descriptor, say)
        graphs.foreign("nvjet_sm90_tst_64x8_64x16", (16, struct.pack("<QQ", x.data_ptr() >> 4, 0x1234)))
        x.add_(1.0)  # the function writes x: a copy back after each replay
        scale[1, N](out, x, 2.0, N)

    x, out = f32(), f32()
    seq = graphs.record(step, x, out)
    assert "copies x" in repr(seq)
    assert "input 'x': copied into the sequence's own buffer before each replay and back after it, because node 0 " \
           "(kernel 'nvjet_sm90_tst_64x8_64x16', not launchpad's) holds it in a form launchpad cannot re-point (param " \
           "0, bytes 0-7)" in seq.explain()  # fmt: skip
    static = graphs.words(seq, 1)[0] << 4  # what the foreign kernel reads: the sequence's buffer, never x2
    x2 = f32()
    seq(x2)
    assert graphs.copied_from(seq, 0) == x2.data_ptr()  # copied in from x2
    assert graphs.copied_to(seq, seq.nodes - 1) == x2.data_ptr()  # and back into x2
    assert graphs.words(seq, 1)[0] << 4 == static and graphs.words(seq, 2)[1] == static  # both read the buffer
    # where nodes are updated from the device, the copies are launchpad's copy kernel, changed by the updater
    # (a memcpy node only the host changes: a driver call per replay and copy)
    copies = [seq._state.plan.nodes[k] for k in (0, seq.nodes - 1)]
    if graphs.device_updates:
        assert [(n.kind, n.name) for n in copies] == [("kernel", "launchpad_copy_bytes")] * 2
        assert graphs.host_updates == [] and graphs.reads(seq, 0)[16:24] == struct.pack("<Q", 4 * N)  # (its size)
    else:
        assert [n.kind for n in copies] == ["memcpy"] * 2 and len(graphs.host_updates) == 2


def test_an_encoding_that_agrees_with_the_base_on_the_probes_bytes_at_a_third_address_is_copied(module, graphs):
    """An injective encoding of an input's address whose third-address value agrees with the base's
    on the bytes the probe changed, and differs on others: no host leftover (which repeats a whole
    value), so the input is copied. Tested at byte level, the third address looked like the base's
    and the node kept reading the recorded tensor (seen as a flake of CI's sanitizer leg, where the
    allocator's addresses made the coincidence)."""
    scale = graphs.fake.install(module["scale"])
    codes: dict[int, int] = {}

    def encode(address: int) -> int:  # injective: 0x0100 for the first address seen, 0x0200, then 0x0101
        return codes.setdefault(address, (0x0100, 0x0200, 0x0101, 0x0300, 0x0400, 0x0500)[min(len(codes), 5)] +
                                max(len(codes) - 5, 0) * 0x100)  # fmt: skip

    def step(x, out):
        graphs.foreign("nvjet_sm90_tst_64x8_64x16", (16, struct.pack("<QQ", encode(x.data_ptr()), 0x1234)))
        scale[1, N](out, x, 2.0, N)

    seq = graphs.record(step, f32(), f32())
    assert "copies x" in repr(seq), seq.explain()
    assert len(codes) >= 3  # the base, the probe and the third address were all seen


def test_each_replay_returns_new_outputs(module, graphs):
    scale = graphs.fake.install(module["scale"])

    def step(x, s):
        out = graphs.pool(torch.empty(N))
        scale[1, N](out, x, s, N)
        return out

    seq = graphs.record(step, f32(), 2.0)
    first = seq(f32(), 3.0)
    assert graphs.words(seq, 0)[0] == first.data_ptr() and first.shape == (N,) and first.dtype == torch.float32
    second = seq(s=4.0)
    assert second.data_ptr() != first.data_ptr() and graphs.words(seq, 0)[0] == second.data_ptr()
    assert "output 0: new memory each replay, written there by 1 re-pointed place(s)" in seq.explain()


def test_outputs_in_tuples_dicts_views_inputs_and_bound_memory(module, graphs):
    scale = graphs.fake.install(module["scale"])
    bound = f32()

    def step(x):
        out = graphs.pool(torch.empty(2, N))
        scale[1, N](out[1], x, 2.0, N)
        scale[1, N](bound, x, 3.0, N)
        return {"out": out, "row": (out[1], None), "x": x[1:], "bound": bound}

    seq = graphs.record(step, f32())
    x2 = f32()
    got = seq(x2)
    assert set(got) == {"out", "row", "x", "bound"} and got["row"][1] is None
    assert got["out"].shape == (2, N) and got["row"][0].data_ptr() == got["out"].data_ptr() + 4 * N
    assert graphs.words(seq, 0)[0] == got["row"][0].data_ptr()
    assert got["x"].data_ptr() == x2.data_ptr() + 4 and got["x"].shape == (N - 1,)
    assert got["bound"] is bound


def test_an_output_no_node_can_follow_is_copied_out(module, graphs):
    def step(x):
        out = graphs.pool(torch.empty(N))
        graphs.foreign(
            "nvjet_sm90_tst_64x8_64x16", (16, struct.pack("<QQ", x.data_ptr(), out.data_ptr() >> 4 | 0xF << 60))
        )
        return out

    seq = graphs.record(step, f32())
    got = seq(f32())
    assert graphs.copied_to(seq, seq.nodes - 1) == got.data_ptr()  # the copy's destination
    assert "output 0: new memory each replay, copied there at the graph's end, because node 0" in seq.explain()


def test_nccl_kernels_are_never_re_pointed(graphs):
    with pytest.raises(lp.RecordError, match=r"^sequence input 'x' is read by the NCCL kernel 'ncclDevKernel_AllReduce' "
                       r"\(node 0\): NCCL's kernels must not be re-pointed \(NVIDIA/nccl#961\)"):  # fmt: skip
        graphs.record(lambda x: graphs.foreign("ncclDevKernel_AllReduce", (8, x.data_ptr())), f32())


def test_a_kernel_whose_parameters_the_driver_cannot_list(module, graphs):
    scale = graphs.fake.install(module["scale"])

    def step(x, s):
        graphs.node("kernel", function=0xF99, layout=None, block=None, name="opaque")
        scale[1, N](f32(), x, s, N)

    with pytest.raises(lp.RecordError, match=r"^sequence input 's' may reach node 0 \(kernel 'opaque', not "
                       r"launchpad's\), whose parameters the driver cannot list"):  # fmt: skip
        graphs.record(step, f32(), 2.0)
    seq = graphs.record(lambda x: step(x, 2.0), f32())
    assert "because node 0 (kernel 'opaque', not launchpad's) has parameters the driver cannot list" in seq.explain()


def test_uninitialized_padding_does_not_pass_for_an_address(graphs):
    """torch's functors carry padding that differs on every capture: that is no address of the output.
    (Every byte of it differs here; a byte that happens to be equal in the kept capture and its twin
    cannot be told from an address's, and costs the output a copy.)"""
    captures = [0]

    def step(x):
        captures[0] += 1
        out = graphs.pool(torch.empty(N))
        padding = bytes((37 * captures[0] + 11 * j) % 256 for j in range(24))
        graphs.foreign("at::native::clamp_scalar_kernel", (4, struct.pack("<i", N)), (24, padding),
                       (16, struct.pack("<QQ", out.data_ptr(), x.data_ptr())))  # fmt: skip
        return out

    seq = graphs.record(step, f32())
    got = seq(f32())
    assert graphs.words(seq, 0)[4] == got.data_ptr()  # the output's pointer re-pointed, nothing copied
    assert "written there by 1 re-pointed place(s)" in seq.explain() and "copied" not in seq.explain()


@pytest.mark.parametrize("with_scalar", [True, False], ids=["x-and-lr", "x"])
def test_padding_equal_in_base_and_control_is_confirmed_before_it_costs(graphs, with_scalar):
    """Padding that happened to match between the base and the control but differs in the probes
    (seen on an H100 in torch.relu's functor) is captured again before it costs a copy or a
    refusal: it differs between two captures of the same values, so it is left as recorded."""
    captures = [0]

    def step(x, lr=0.5):
        if graphs._capturing is not None:
            captures[0] += 1
        out = graphs.pool(torch.empty(N))
        # the base's and control's alike; every byte another on each later capture
        padding = bytes(8) if captures[0] <= 2 else bytes((37 * captures[0] + 11 * j) % 256 for j in range(8))
        graphs.foreign("at::native::vectorized_elementwise_kernel<4, clamp_scalar>", (4, struct.pack("<i", N)),
                       (4, struct.pack("<f", lr)), (24, struct.pack("<fxxxxQ", 0.0, 0) + padding),
                       (16, struct.pack("<QQ", out.data_ptr(), x.data_ptr())))  # fmt: skip
        return out

    seq = graphs.record(step, f32(), 0.5) if with_scalar else graphs.record(lambda x: step(x), f32())
    assert "copied" not in seq.explain(), seq.explain()
    x = f32(value=3.0)
    got = seq(x, 0.25) if with_scalar else seq(x)
    words = graphs.words(seq, 0)
    assert words[-1] == x.data_ptr() and words[-2] == got.data_ptr()  # re-pointed, not copied
    if with_scalar:
        assert struct.unpack("<f", struct.pack("<Q", words[0])[4:])[0] == 0.25  # lr (param 1) followed


@pytest.mark.parametrize("leftover", ["the same at every other address", "the base's at a third address"])
def test_leftovers_along_the_probes_path_are_told_from_an_encoded_address(graphs, leftover):
    """torch's TensorListMetadata keeps what the host stack held in its unused tail: zeros in the base
    and its controls, a host stack address in every capture with the input elsewhere (seen on an H100,
    in some recordings of a training step). A third address gives the same bytes back: they do not
    follow the address, and cost no copy."""
    seen = []

    def step(x):
        if graphs._capturing is not None:
            seen.append(x.data_ptr())
        out = graphs.pool(torch.empty(N))
        elsewhere = [a for a in seen if a != seen[0]]
        if leftover == "the same at every other address":
            tail = 0x7FFFCA9BF460 if elsewhere and x.data_ptr() != seen[0] else 0
        else:  # one value at the first probe's address only
            tail = 0x7FFFCA9BF460 if elsewhere and x.data_ptr() == elsewhere[0] else 0
        graphs.foreign("at::native::multi_tensor_apply_kernel<TensorListMetadata<1>>", (4, struct.pack("<i", N)),
                       (8, struct.pack("<Q", tail)), (16, struct.pack("<QQ", out.data_ptr(), x.data_ptr())))  # fmt: skip
        return out

    seq = graphs.record(step, f32())
    assert "copied" not in seq.explain(), seq.explain()
    x = f32(value=3.0)
    got = seq(x)
    assert graphs.words(seq, 0)[-1] == x.data_ptr() and graphs.words(seq, 0)[-2] == got.data_ptr()


def test_an_address_held_in_a_form_of_its_own_is_copied(graphs):
    """Bytes that take a third value at a third address may encode it (as a TMA descriptor does): the
    input is copied, never left as recorded."""

    def step(x):
        out = graphs.pool(torch.empty(N))
        graphs.foreign("encoded_kernel", (4, struct.pack("<i", N)), (8, struct.pack("<Q", (x.data_ptr() >> 4) ^ 0x5A5A)),
                       (8, struct.pack("<Q", out.data_ptr())))  # fmt: skip
        return out

    seq = graphs.record(step, f32())
    assert "copies it into a buffer" in seq.explain() or "copied" in seq.explain(), seq.explain()
    x = f32(value=3.0)
    got = seq(x)
    assert torch.equal(got, torch.zeros(N)) or got.data_ptr() != x.data_ptr()
