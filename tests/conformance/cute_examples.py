"""CuTe DSL's own cluster examples through launchpad: compiled where CuTe DSL is, run on a Hopper GPU
where it is not.

NVIDIA's examples are not copied here: ``compile`` imports them from a CUTLASS checkout and saves
each kernel launchpad makes of them (``Kernel.save``) with what it is; ``run`` loads those
artifacts on the GPU machine (no CuTe DSL there), launches each with random inputs through
``k[grid](...)`` and compares with torch, refuses a wrong argument, and replays one in a recorded
step. Two examples are Hopper kernels launched in thread block clusters that exchange shared
memory between the blocks of a cluster (distributed shared memory through ``mapa``), the third a
class-based normalization (a ``@cute.jit`` ``__call__``, a static ``TiledCopy`` parameter):

* ``examples/python/CuTeDSL/experimental/primitives/mapa.py``: each block of a cluster reads its
  ring neighbour's rank from that block's shared memory (an ``mbarrier`` signalled across blocks);
* ``examples/python/CuTeDSL/experimental/primitives/reduction/cluster_smem_reduce.py``: the blocks of
  a cluster reduce one tile each into rank 0's shared memory (``red.shared::cluster``, float
  atomics, or a tree through ``mapa``), for sums, minima and maxima of four dtypes;
* ``examples/python/CuTeDSL/cute/hopper/kernel/cta_norm/cta_norm.py`` (``hopper/cta_norm.py`` in
  older checkouts): RMSNorm and LayerNorm of each row by one block, 128-bit loads, a block
  reduction through warp shuffles and shared memory.

Usage::

    python tests/conformance/cute_examples.py compile --cutlass ~/cutlass --out artifacts/   # CuTe DSL
    python tests/conformance/cute_examples.py run artifacts/ --report report.md             # an H100
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

EXAMPLES = Path("examples/python/CuTeDSL/experimental/primitives")
ROWS = 4  # the reduction example's _ROWS_PER_TILE
#: (cluster shape, tile columns, op, dtype) of the reduction example's variants: every path of its
#: kernel (root red.shared::cluster for i32 and f32 sums, float atomics for f32 min/max, the tree
#: for f16/bf16 min/max) and both cluster ranks.
REDUCTIONS = [((2, 1), 4, "add", "i32"), ((2, 2), 8, "add", "f32"), ((4, 1), 2, "max", "f32"),
              ((2, 2), 4, "min", "i32"), ((2, 2), 4, "min", "bf16"), ((4, 2), 1, "max", "f16")]  # fmt: skip
RING_SIZES = [2, 4, 8]
#: (norm, dtype, hidden size) of the normalization example's variants.
NORMS = [("rms", "fp16", 4096), ("layer", "fp16", 4096), ("rms", "bf16", 1024), ("layer", "bf16", 2048)]
NORM_PATHS = [Path("examples/python/CuTeDSL/cute/hopper/kernel/cta_norm/cta_norm.py"),
              Path("examples/python/CuTeDSL/hopper/cta_norm.py")]  # fmt: skip


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def compile_examples(cutlass: Path, out: Path) -> list[dict]:
    """Compile each variant for sm_90a through ``launchpad.from_cute`` and save it under ``out``."""
    import cutlass as cutlass_dsl
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

    import launchpad as lp

    out.mkdir(parents=True, exist_ok=True)
    mapa = _import(cutlass / EXAMPLES / "mapa.py", "cute_example_mapa")
    reduce = _import(cutlass / EXAMPLES / "reduction" / "cluster_smem_reduce.py", "cute_example_cluster_smem_reduce")
    entries = []
    for size in RING_SIZES:
        dst = make_fake_compact_tensor(cutlass_dsl.Int32, (size,))
        k = lp.from_cute(mapa.host, (dst, size), arch="sm_90a")
        entries.append({"name": f"mapa_ring{size}", "example": "mapa", "cluster": [size, 1]})
        k.save(out / f"{entries[-1]['name']}.json")
    for (cx, cy), cols, op, dtype in REDUCTIONS:
        element = reduce._CUTLASS_DTYPES[dtype]
        src = make_fake_compact_tensor(element, (cx * cy, ROWS, cols), stride_order=(2, 1, 0), assumed_align=16)
        dst = make_fake_compact_tensor(element, (ROWS, cols), stride_order=(1, 0), assumed_align=16)
        k = lp.from_cute(reduce._host, (src, dst, make_fake_stream(), (cx, cy), op, cols, dtype), arch="sm_90a")
        name = f"cluster_smem_reduce_{cx}x{cy}_{op}_{dtype}_cols{cols}"
        entries.append({"name": name, "example": "cluster_smem_reduce", "cluster": [cx, cy], "op": op,
                        "dtype": dtype, "cols": cols})  # fmt: skip
        k.save(out / f"{name}.json")
    norm_path = next((cutlass / p for p in NORM_PATHS if (cutlass / p).is_file()), None)
    if norm_path is None:
        raise FileNotFoundError(f"no cta_norm.py under {cutlass} (looked for {', '.join(map(str, NORM_PATHS))})")
    norm = _import(norm_path, "cute_example_cta_norm")
    for kind, dtype, hidden in NORMS:
        element = norm.DTYPE_MAP[dtype]
        x = make_fake_compact_tensor(element, (cute.sym_int32(), hidden), stride_order=(1, 0), assumed_align=16)
        w = make_fake_compact_tensor(element, (hidden,), assumed_align=16)
        args = (x, x, w, w if kind == "layer" else None, cutlass_dsl.Float32(1e-6))
        k = lp.from_cute(norm.CtaNorm(hidden, kind, None), args, arch="sm_90a")
        entries.append({"name": f"cta_norm_{kind}_{dtype}_{hidden}", "example": "cta_norm", "norm": kind,
                        "dtype": dtype, "hidden": hidden, "cluster": None})  # fmt: skip
        k.save(out / f"{entries[-1]['name']}.json")
    for e in entries:
        print("compiled", e["name"])
    (out / "manifest.json").write_text(json.dumps(entries, indent=1))
    return entries


TORCH_DTYPES = {"i32": "int32", "f32": "float32", "bf16": "bfloat16", "f16": "float16", "fp16": "float16"}


def _check_norm(k, entry: dict) -> str:
    """Rows of random values against torch's rms_norm / layer_norm (the example's own tolerance, 1e-3;
    bf16: its rounding, 1e-2); the static TiledCopy left out, eps by name; a wrong width refused."""
    import torch

    import launchpad as lp

    dtype, hidden = getattr(torch, TORCH_DTYPES[entry["dtype"]]), entry["hidden"]
    tol = 1e-3 if dtype == torch.float16 else 1e-2
    for seed, rows in enumerate((1, 7, 300)):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(rows, hidden, device="cuda", generator=g).to(dtype)
        w = torch.randn(hidden, device="cuda", generator=g).to(dtype)
        b = torch.randn(hidden, device="cuda", generator=g).to(dtype) if entry["norm"] == "layer" else None
        y = torch.full_like(x, float("nan"))
        k[rows](y, x, w, b, eps=1e-6)
        torch.cuda.synchronize()
        if entry["norm"] == "layer":
            want = torch.layer_norm(x.float(), (hidden,), w.float(), b.float(), 1e-6).to(dtype)
        else:
            want = torch.rms_norm(x.float(), (hidden,), w.float(), 1e-6).to(dtype)
        torch.testing.assert_close(y, want, rtol=tol, atol=tol)
    try:
        k[1](y[:, :-8], x[:, :-8], w, b, eps=1e-6)
    except lp.ArgumentError as exc:
        assert "argument 0 ('mY')" in str(exc), exc
    else:
        raise AssertionError("a row of another width was launched")
    return f"1, 7 and 300 random rows to {tol} (the example's tolerance); a wrong width refused"


def _check_ring(k, entry: dict) -> str:
    import torch

    size = entry["cluster"][0]
    dst = torch.full((size,), -1, dtype=torch.int32, device="cuda")
    k[size](dst)
    torch.cuda.synchronize()
    want = (torch.arange(size, device="cuda", dtype=torch.int32) + 1) % size
    assert torch.equal(dst, want), (dst.tolist(), want.tolist())
    return f"dst = {dst.tolist()}"


def _reference(src, op: str):
    return {"add": lambda: src.sum(0, dtype=src.dtype), "max": lambda: src.amax(0), "min": lambda: src.amin(0)}[op]()


def _random_src(entry: dict, seed: int):
    import torch

    cx, cy = entry["cluster"]
    dtype = getattr(torch, TORCH_DTYPES[entry["dtype"]])
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (cx * cy, ROWS, entry["cols"])
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, shape, device="cuda", dtype=dtype, generator=g)
    return torch.randn(shape, device="cuda", generator=g).to(dtype)


def _check_reduce(k, entry: dict) -> str:
    import torch

    import launchpad as lp

    cx, cy = entry["cluster"]
    exact = not (entry["op"] == "add" and entry["dtype"] != "i32")  # a float sum's order is the atomics'
    for seed in range(5):
        src = _random_src(entry, seed)
        out = torch.full((ROWS, entry["cols"]), -7, dtype=src.dtype, device="cuda")
        k[cx, cy](src, out)
        torch.cuda.synchronize()
        want = _reference(src, entry["op"])
        if exact:
            assert torch.equal(out, want), (seed, (out - want).abs().max().item())
        else:
            torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    try:
        k[cx, cy](src.double() if src.dtype != torch.float64 else src.float(), out)
    except lp.ArgumentTypeError as exc:
        assert "argument 0 ('src')" in str(exc), exc
    else:
        raise AssertionError("a float64 src was launched")
    return (
        "5 random inputs "
        + ("bit for bit" if exact else "to 1e-5 (float atomics in any order)")
        + "; a wrong dtype refused"
    )


def _check_recorded(k, entry: dict) -> str:
    """20 replays of a recorded step around the kernel, bit for bit against eager."""
    import torch

    import launchpad as lp

    cx, cy = entry["cluster"]

    def step(src, out):
        k[cx, cy](src * 2, out)
        return out + 1

    out = torch.empty(ROWS, entry["cols"], dtype=torch.int32, device="cuda")
    seq = lp.record(step, _random_src(entry, 100), out)
    for seed in range(20):
        src = _random_src(entry, 101 + seed)
        got = seq(src, out)
        torch.cuda.synchronize()
        assert torch.equal(got, _reference(src * 2, entry["op"]) + 1), seed
    seq.close()
    return "recorded: 20 replays bit for bit"


def run(folder: Path, report: Path | None) -> int:
    import torch

    import launchpad as lp

    entries = json.loads((folder / "manifest.json").read_text())
    lines, failed = [], 0
    device = torch.cuda.get_device_name()
    for entry in entries:
        k = lp.load(folder / f"{entry['name']}.json")
        try:
            check = {"mapa": _check_ring, "cluster_smem_reduce": _check_reduce, "cta_norm": _check_norm}
            what = check[entry["example"]](k, entry)
            if entry["example"] == "cluster_smem_reduce" and entry["dtype"] == "i32":
                what += "; " + _check_recorded(k, entry)
            launch = f"cluster {tuple(k.spec.plan.cluster)}" if k.spec.plan.cluster else f"block {k.spec.plan.block[0]}"
            line = f"| {entry['name']} | {launch} | equal | {what} |"
        except Exception as exc:  # every failure is reported, then the exit status says so
            failed += 1
            line = f"| {entry['name']} | cluster {tuple(k.spec.plan.cluster or ())} | FAILED | {type(exc).__name__}: {exc} |"
        print(line, flush=True)
        lines.append(line)
    head = [f"# CuTe DSL's examples through launchpad, {device}", "",
            "| kernel | launch | result | checked |", "| --- | --- | --- | --- |"]  # fmt: skip
    tail = f"cute examples: {len(entries) - failed} of {len(entries)} equal to torch, {failed} failed"
    print(tail)
    if report is not None:
        report.write_text("\n".join([*head, *lines, "", tail, ""]))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile the examples (needs CuTe DSL and a CUTLASS checkout)")
    c.add_argument("--cutlass", type=Path, required=True, help="a CUTLASS checkout (its examples/python/CuTeDSL)")
    c.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("run", help="launch the saved kernels on a Hopper GPU and compare with torch")
    r.add_argument("folder", type=Path)
    r.add_argument("--report", type=Path)
    args = parser.parse_args(argv)
    if args.command == "compile":
        compile_examples(args.cutlass, args.out)
        return 0
    return run(args.folder, args.report)


if __name__ == "__main__":
    sys.exit(main())
