"""What a new input costs a replayed CUDA graph on the GPU, by update mechanism (a device experiment).

A step of 20 kernels ``out[j] = a * x + y`` captured once; each variant replays it 200 times back
to back with new inputs rotating among 4 sets, one synchronization at the end; wall time per step
(the GPU-bound figure) and the host's issue time per step, medians of rounds. Every variant's last
step is checked against torch. Variants:

- plain: cuGraphLaunch, nothing new (the floor)
- host1 / host20: cuGraphExecKernelNodeSetParams on 1 / 20 nodes, then cuGraphLaunch
- host1_upload: the same, then cuGraphUpload on the launch stream before the launch
- dev_out: the 20 nodes device-updatable; an updater kernel before the graph (values by value)
- dev_in: the 20 nodes device-updatable; an updater node inside the graph reading a pinned ring
- torch_copy: torch's CUDAGraph after copy_ of the 2 inputs (the anchor)

Then a survey of torch's own kernels in a capture (which parameter words follow an input).
Run on the device: ``PYTHONPATH=. python3 benchmarks/experiments/graph_updates.py``.
"""

from __future__ import annotations

import ctypes
import functools
import statistics
import struct
import sys
import time

import torch
from cuda.bindings import driver as cu

import launchpad as lp

K = 20
SOURCE = r"""
extern "C" __global__ void axpy(float a, const float* x, const float* y, float* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = a * x[i] + y[i];
}
"""
UPDATER = r"""
struct Table { unsigned long long n; unsigned long long e[3 * 64]; };
extern "C" __global__ void lp_apply(Table t) {
    unsigned int i = threadIdx.x;
    if (i >= t.n) return;
    if (cudaGraphKernelNodeSetParam((cudaGraphDeviceNode_t)t.e[3 * i], t.e[3 * i + 1] & 0xffffffffu, &t.e[3 * i + 2],
                                    t.e[3 * i + 1] >> 32) != 0) __trap();
}
extern "C" __global__ void lp_apply_ring(const unsigned long long* ring, unsigned long long* counter,
                                         unsigned long long* consumed, unsigned int slots, unsigned int stride) {
    __shared__ unsigned long long c;
    if (threadIdx.x == 0) c = *counter;
    __syncthreads();
    const unsigned long long* slot = ring + (c % slots) * stride;
    unsigned int n = (unsigned int)slot[0];
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
        const unsigned long long* e = slot + 1 + 3 * i;
        if (cudaGraphKernelNodeSetParam((cudaGraphDeviceNode_t)e[0], e[1] & 0xffffffffu, &e[2], e[1] >> 32) != 0)
            __trap();
    }
    __syncthreads();
    if (threadIdx.x == 0) { *counter = c + 1; *(volatile unsigned long long*)consumed = c + 1; __threadfence_system(); }
}
"""


def ck(result, what="call"):
    err = result[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what}: {err.name}")
    return result[1] if len(result) == 2 else result[1:]


@functools.cache
def updater_functions():
    import glob
    import os

    from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions

    arch = "sm_90"
    obj = Program(
        UPDATER, "c++", ProgramOptions(arch=arch, relocatable_device_code=True, link_time_optimization=True)
    ).compile("ltoir")
    candidates = glob.glob("/usr/local/cuda/lib64/libcudadevrt.a")
    try:
        import nvidia

        for p in nvidia.__path__:
            candidates += glob.glob(os.path.join(p, "cu13/lib/libcudadevrt.a"))
    except ImportError:
        pass
    lib = ObjectCode.from_library(candidates[0])
    cubin = bytes(Linker(obj, lib, options=LinkerOptions(arch=arch, link_time_optimization=True)).link("cubin").code)
    module = ck(cu.cuModuleLoadData(cubin), "load updater")
    return (ck(cu.cuModuleGetFunction(module, b"lp_apply")), ck(cu.cuModuleGetFunction(module, b"lp_apply_ring")))


def timed(call, steps, rounds):
    for _ in range(8):
        call()
    torch.cuda.synchronize()
    walls, hosts = [], []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            call()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        walls.append((t2 - t0) / steps * 1e6)
        hosts.append((t1 - t0) / steps * 1e6)
    return statistics.median(walls), statistics.median(hosts)


class Step:
    def __init__(self, n):
        self.n = n
        self.k = lp.compile_cuda(SOURCE, "axpy")
        g = torch.Generator(device="cuda").manual_seed(0)
        self.sets = [
            (torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g), 0.5 + 0.25 * i)
            for i in range(4)
        ]
        self.out = torch.empty(K, n, device="cuda")
        self.blocks = min(1024, (n + 255) // 256)
        self.stream = torch.cuda.current_stream().cuda_stream

    def launches(self, x, y, a):
        k = self.k[self.blocks, 256]
        for j in range(K):
            k(a, x, y, self.out[j], self.n)

    def check(self, x, y, a, what):
        torch.cuda.synchronize()
        if not torch.allclose(self.out, (a * x + y).expand(K, -1), rtol=1e-6, atol=1e-6):
            print(f"WRONG RESULT: {what}", flush=True)
            return False
        return True

    def capture(self, before=None):
        x, y, a = self.sets[0]
        self.launches(x, y, a)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(graph):
            if before is not None:
                before()
            self.launches(x, y, a)
        nodes = ck(cu.cuGraphGetNodes(cu.CUgraph(int(graph.raw_cuda_graph())), 0))[1]
        nodes = ck(cu.cuGraphGetNodes(cu.CUgraph(int(graph.raw_cuda_graph())), nodes))[0]
        kernels = []
        for node in nodes:
            if ck(cu.cuGraphNodeGetType(node)) == cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
                p = ck(cu.cuGraphKernelNodeGetParams(node))
                kernels.append((node, p))
        return graph, kernels


def param_block(p, nparams=5):
    """A ctypes copy of a node's kernelParams (5 params: a, x, y, out, n) we can rewrite."""
    ptrs = (ctypes.c_void_p * nparams).from_address(int(p.kernelParams))
    sizes = [4, 8, 8, 8, 4]
    bufs = [ctypes.create_string_buffer(ctypes.string_at(ptrs[i], sizes[i]), 8) for i in range(nparams)]
    arr = (ctypes.c_void_p * nparams)(*[ctypes.addressof(b) for b in bufs])
    return bufs, arr


def host_variant(step, nodes_updated, upload):
    graph, kernels = step.capture()
    graph.instantiate()
    exe = cu.CUgraphExec(int(graph.raw_cuda_graph_exec()))
    blocks = [param_block(p) for _, p in kernels]
    stream = cu.CUstream(step.stream)
    it = iter(range(10**9))

    def call():
        x, y, a = step.sets[next(it) % 4]
        for j in range(nodes_updated):
            bufs, _ = blocks[j]
            ctypes.memmove(bufs[1], struct.pack("<Q", x.data_ptr()), 8)
            if nodes_updated == K:
                ctypes.memmove(bufs[2], struct.pack("<Q", y.data_ptr()), 8)
                ctypes.memmove(bufs[0], struct.pack("<f", a), 4)
        for j in range(nodes_updated):
            node, p = kernels[j]
            p.kernelParams = ctypes.addressof(blocks[j][1])
            ck(cu.cuGraphExecKernelNodeSetParams(exe, node, p), "set params")
        if upload:
            ck(cu.cuGraphUpload(exe, stream), "upload")
        ck(cu.cuGraphLaunch(exe, stream), "launch")

    return graph, call


def make_updatable(kernels):
    attr = cu.CUkernelNodeAttrID.CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE
    devnodes = []
    for node, _ in kernels:
        v = cu.CUkernelNodeAttrValue()
        v.deviceUpdatableKernelNode.deviceUpdatable = 1
        ck(cu.cuGraphKernelNodeSetAttribute(node, attr, v), "set device-updatable")
        got = ck(cu.cuGraphKernelNodeGetAttribute(node, attr), "get device node")
        devnodes.append(int(got.deviceUpdatableKernelNode.devNode))
    return devnodes


class Table(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint64), ("e", ctypes.c_uint64 * (3 * 64))]


def entries(devnode, x, y, a):
    bits = struct.unpack("<I", struct.pack("<f", a))[0]
    return [devnode, 0 | (4 << 32), bits, devnode, 8 | (8 << 32), x.data_ptr(), devnode, 16 | (8 << 32), y.data_ptr()]


def dev_out_variant(step, apply_fn):
    graph, kernels = step.capture()
    devnodes = make_updatable(kernels)
    graph.instantiate()
    exe = cu.CUgraphExec(int(graph.raw_cuda_graph_exec()))
    stream = cu.CUstream(step.stream)
    ck(cu.cuGraphUpload(exe, stream), "upload")
    table = Table()
    args = (ctypes.c_void_p * 1)(ctypes.addressof(table))
    it = iter(range(10**9))

    def call():
        x, y, a = step.sets[next(it) % 4]
        table.n = 3 * K
        for j in range(K):  # a (offset 0), x (offset 8) and y (offset 16) in every node
            table.e[9 * j : 9 * j + 9] = entries(devnodes[j], x, y, a)
        ck(cu.cuLaunchKernel(apply_fn, 1, 1, 1, 64, 1, 1, 0, stream, ctypes.addressof(args), 0), "updater")
        ck(cu.cuGraphLaunch(exe, stream), "launch")

    return graph, call


def dev_in_variant(step, ring_fn, slots=1024):
    stride = 1 + 3 * 3 * K
    ring = torch.zeros(slots * stride, dtype=torch.int64, pin_memory=True)
    consumed = torch.zeros(1, dtype=torch.int64, pin_memory=True)
    counter = torch.zeros(1, dtype=torch.int64, device="cuda")
    ring_view = (ctypes.c_uint64 * (slots * stride)).from_address(ring.data_ptr())
    consumed_view = ctypes.c_uint64.from_address(consumed.data_ptr())
    vals = [
        ctypes.c_void_p(ring.data_ptr()),
        ctypes.c_void_p(counter.data_ptr()),
        ctypes.c_void_p(consumed.data_ptr()),
        ctypes.c_uint32(slots),
        ctypes.c_uint32(stride),
    ]
    args = (ctypes.c_void_p * 5)(*[ctypes.addressof(v) for v in vals])

    def before():
        s = cu.CUstream(torch.cuda.current_stream().cuda_stream)
        ck(cu.cuLaunchKernel(ring_fn, 1, 1, 1, 64, 1, 1, 0, s, ctypes.addressof(args), 0), "ring updater capture")

    graph, kernels = step.capture(before)
    kernels = [kn for kn in kernels if int(kn[1].func) != int(ring_fn)]
    devnodes = make_updatable(kernels)
    graph.instantiate()
    exe = cu.CUgraphExec(int(graph.raw_cuda_graph_exec()))
    stream = cu.CUstream(step.stream)
    ck(cu.cuGraphUpload(exe, stream), "upload")
    state = {"n": 0, "waits": 0}
    it = iter(range(10**9))

    def call():
        x, y, a = step.sets[next(it) % 4]
        h = state["n"]
        while h - consumed_view.value >= slots:
            state["waits"] += 1
            time.sleep(0)
        base = (h % slots) * stride
        ring_view[base] = 3 * K
        for j in range(K):
            o = base + 1 + 9 * j
            ring_view[o : o + 9] = entries(devnodes[j], x, y, a)
        ck(cu.cuGraphLaunch(exe, stream), "launch")
        state["n"] = h + 1

    return graph, call, state


def lp_variant(step, nodes_updated):
    x, y, a = step.sets[0]

    def fn(x, y, a):
        k = step.k[step.blocks, 256]
        x0, y0, a0 = step.sets[1]
        for j in range(K):
            if j < nodes_updated:
                k(a, x, y, step.out[j], step.n)
            else:
                k(a0, x0, y0, step.out[j], step.n)

    seq = lp.record(fn, x, y, a)
    it = iter(range(10**9))
    if nodes_updated == 0:
        return seq, lambda: seq()
    return seq, lambda: seq(*step.sets[next(it) % 4])


def torch_copy_variant(step):
    xs, ys = torch.empty(step.n, device="cuda"), torch.empty(step.n, device="cuda")
    a = step.sets[0][2]
    step.launches(xs, ys, a)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step.launches(xs, ys, a)
    it = iter(range(10**9))

    def call():
        x, y, _ = step.sets[next(it) % 4]
        xs.copy_(x)
        ys.copy_(y)
        graph.replay()

    return graph, call


def run_costs(n, steps, rounds, variants):
    step = Step(n)
    apply_fn, ring_fn = updater_functions()
    rows = {}
    makers = {
        "plain": lambda: host_variant(step, 0, False),
        "host1": lambda: host_variant(step, 1, False),
        "host20": lambda: host_variant(step, K, False),
        "host1_upload": lambda: host_variant(step, 1, True),
        "dev_out": lambda: dev_out_variant(step, apply_fn),
        "dev_in": lambda: dev_in_variant(step, ring_fn)[:2],
        "torch_copy": lambda: torch_copy_variant(step),
        "lp_plain": lambda: lp_variant(step, 0),
        "lp_new1": lambda: lp_variant(step, 1),
        "lp_new20": lambda: lp_variant(step, K),
    }
    for name in variants:
        try:
            graph, call = makers[name]()
            wall, host = timed(call, steps, rounds)
            # correctness: the last set's values (host1 updates x only in node 0; others all)
            idx = (8 + steps * rounds - 1) % 4
            x, y, a = step.sets[idx]
            ok = True
            if name in ("host20", "dev_out", "dev_in", "lp_new20"):
                ok = step.check(x, y, a, f"{name} n={n}")
            elif name == "torch_copy":
                ok = step.check(x, y, step.sets[0][2], f"{name} n={n}")
            rows[name] = (wall, host, ok)
            del graph
        except Exception as exc:  # report and go on
            rows[name] = (float("nan"), float("nan"), f"{type(exc).__name__}: {exc}")
    return rows


def survey():
    """Which parameter words of torch's kernels follow an input between two captures."""
    torch.manual_seed(0)
    w = torch.randn(256, 256, device="cuda")
    idx = torch.randint(0, 64, (32,), device="cuda")
    ops = {
        "relu": lambda x: torch.relu(x),
        "add_alpha": lambda x: torch.add(x, x, alpha=2.0),
        "matmul": lambda x: x @ w,
        "layer_norm": lambda x: torch.nn.functional.layer_norm(x, (256,)),
        "sum": lambda x: x.sum(dim=1),
        "index_select": lambda x: x.index_select(0, idx),
        "copy_": lambda x: torch.empty_like(x).copy_(x),
        "zero_": lambda x: x.zero_(),
        "bf16_matmul": lambda x: x.bfloat16() @ w.bfloat16(),
    }
    for name, op in ops.items():
        caps = []
        for _ in range(2):
            x = torch.randn(64, 256, device="cuda")
            op(x)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph(keep_graph=True)
            with torch.cuda.graph(g):
                op(x)
            raw = cu.CUgraph(int(g.raw_cuda_graph()))
            count = ck(cu.cuGraphGetNodes(raw, 0))[1]
            nodes = ck(cu.cuGraphGetNodes(raw, count))[0][:count]
            caps.append((x, g, nodes))
        print(f"--- {name}: {len(caps[0][2])} nodes")
        for i, (n0, n1) in enumerate(zip(caps[0][2], caps[1][2])):
            kind = ck(cu.cuGraphNodeGetType(n0))
            if kind != cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
                extra = ""
                if kind == cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMCPY:
                    m = ck(cu.cuGraphMemcpyNodeGetParams(n0))
                    extra = (
                        f"src={int(m.srcDevice) - caps[0][0].data_ptr():#x} from x, dst moved="
                        f"{int(ck(cu.cuGraphMemcpyNodeGetParams(n1)).dstDevice) - int(m.dstDevice):#x} "
                        f"width={m.WidthInBytes} h={m.Height} d={m.Depth} srctype={m.srcMemoryType}"
                    )
                elif kind == cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMSET:
                    m = ck(cu.cuGraphMemsetNodeGetParams(n0))
                    extra = f"dst={int(m.dst) - caps[0][0].data_ptr():#x} from x, width={m.width} elt={m.elementSize}"
                print(f"  node {i}: {kind.name} {extra}")
                continue
            blocks = []
            for node in (n0, n1):
                p = ck(cu.cuGraphKernelNodeGetParams(node))
                f = p.func
                info, j = [], 0
                while True:
                    r = cu.cuFuncGetParamInfo(f, j)
                    if r[0] != cu.CUresult.CUDA_SUCCESS:
                        break
                    info.append((int(r[1]), int(r[2])))
                    j += 1
                total = max((o + s for o, s in info), default=0)
                data = bytearray(total)
                if int(p.kernelParams):
                    ptrs = (ctypes.c_void_p * len(info)).from_address(int(p.kernelParams))
                    for (o, s), ptr in zip(info, ptrs):
                        data[o : o + s] = ctypes.string_at(ptr, s)
                blocks.append((p, info, bytes(data)))
            (p0, info, d0), (_, _, d1) = blocks
            fname = ck(cu.cuFuncGetName(p0.func))
            fname = fname.decode() if isinstance(fname, bytes) else str(fname)
            x0, x1 = caps[0][0], caps[1][0]
            span = x0.numel() * x0.element_size()
            follows, moved = [], []
            for off in range(0, len(d0) - 7, 8):
                v0, v1 = int.from_bytes(d0[off : off + 8], "little"), int.from_bytes(d1[off : off + 8], "little")
                if v0 != v1:
                    if 0 <= v0 - x0.data_ptr() < span and v1 - x1.data_ptr() == v0 - x0.data_ptr():
                        follows.append((off, v0 - x0.data_ptr()))
                    else:
                        moved.append(off)
            print(
                f"  node {i}: {fname[:90]} params={len(info)} bytes={len(d0)} kernelParams={bool(int(p0.kernelParams))} "
                f"extra={bool(int(p0.extra or 0))} sizes={[s for _, s in info][:12]} follows_x={follows} "
                f"other_moved={moved[:8]}"
            )
            v = cu.CUkernelNodeAttrValue()
            v.deviceUpdatableKernelNode.deviceUpdatable = 1
            attr = cu.CUkernelNodeAttrID.CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE
            print(f"    device-updatable: {cu.cuGraphKernelNodeSetAttribute(n0, attr, v)[0].name}")
        try:
            caps[0][1].instantiate()
            caps[0][1].replay()
            torch.cuda.synchronize()
            print("    instantiated and replayed with device-updatable nodes: ok")
        except Exception as exc:
            print(f"    instantiate/replay with device-updatable nodes: {type(exc).__name__}: {exc}")
        del caps


def main():
    if sys.argv[1] == "survey":
        return survey()
    n, variants = int(sys.argv[2]), sys.argv[3:]
    steps, rounds = (200, 11) if n <= 1 << 16 else (100, 5) if n <= 1 << 20 else (10, 3)
    rows = run_costs(n, steps, rounds, variants)
    for name, (wall, host, ok) in rows.items():
        print(
            f"n={n:>9} ({n * 4 // 1024:>6} KB) {name:14s} wall {wall:9.2f} host {host:8.2f} us/step  {ok}", flush=True
        )


if __name__ == "__main__":
    sys.exit(main())
