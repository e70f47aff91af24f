"""A Triton kernel launched through launchpad: the four ways in.

    PYTHONPATH=. python3 examples/triton_kernel.py

Without a GPU it compiles for sm_90 (Triton ships ptxas) and prints what launchpad built: the
parameters read from the cubin, how the Python arguments map onto them, the launch plan, and
the generated launch function. With a GPU it also launches on torch tensors four ways (a
CompiledKernel, a saved artifact, Triton's cache folder, ``triton_launcher``), checks each
against Triton's own launch, shows a refused argument, and times a launch of each.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

# Triton 3.9 warns on each compile that leaves FP fusion to its default (which Triton 3.10
# changes): this example takes the default of the releases before (fusion on) explicitly.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import torch
import triton
import triton.language as tl

import launchpad as lp


@triton.jit
def scaled_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


def per_launch_us(launch, repeat: int = 30, batch: int = 200) -> float:
    """Median host time of one launch: ``batch`` launches without a sync inside, then a sync."""
    launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(batch):
            launch()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / batch * 1e6)
    return statistics.median(times)


def describe(kernel: lp.Kernel) -> None:
    print(kernel)
    for p in kernel.params:
        print(f"  param {p.index}: offset {p.offset:3d} size {p.size} {p.type:8s} {p.name}")
    for a in kernel.args:
        extra = {"const": f" = {a.value!r}", "scratch": f" {a.options}"}.get(a.kind, "")
        checks = (f" align {a.align}" if a.align else "") + (f" multiple of {a.multiple_of}" if a.multiple_of else "")
        print(f"  arg {a.name!r}: {a.kind}{extra}{checks}")
    print(f"  {kernel.plan}")


def main() -> None:
    gpu = torch.cuda.is_available()
    if not gpu:
        from triton.backends.compiler import GPUTarget

        # compile for an H100/H200 without one; the pointers and n are promised 16-aligned
        kernel = lp.from_triton(
            scaled_add, signature="*fp32, *fp32, *fp32, i32, fp32", constexprs={"BLOCK": 1024},
            attrs={"x_ptr": "D", "y_ptr": "D", "out_ptr": "D", "n": "D"}, target=GPUTarget("cuda", 90, 32),
        )  # fmt: skip
        describe(kernel)
        print("launch path:", kernel.launch_path)
        print("no GPU: compiled for sm_90 but not launched")
        return

    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    expected = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    compiled = scaled_add[grid](x, y, expected, n, 0.5, BLOCK=1024)  # Triton's own launch
    torch.testing.assert_close(expected, 0.5 * x + y)

    kernel = lp.from_triton(compiled)  # 1. from the CompiledKernel: all Python arguments, in order
    describe(kernel)
    out = torch.empty_like(x)
    kernel[grid](x, y, out, n, 0.5, 1024)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)

    with tempfile.TemporaryDirectory() as tmp:  # 2. a self-contained artifact (no Triton needed to load)
        saved = lp.load(kernel.save(Path(tmp) / "scaled_add.json"))
        out.zero_()
        saved[grid](x, y, out, n, 0.5, 1024)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)

    folder = Path(next(p for name, p in compiled.metadata_group.items() if name.endswith(".json"))).parent
    cached = lp.load_triton(folder)  # 3. Triton's cache folder: runtime arguments only
    out.zero_()
    cached[grid](x, y, out, n, 0.5)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)

    launcher = lp.triton_launcher(scaled_add)  # 4. a drop-in for scaled_add[grid](...)
    out.zero_()
    launcher[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, y, out, n, 0.5, BLOCK=1024)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)

    try:
        kernel[grid](x[1:], y, out, n - 1, 0.5, 1024)
    except lp.ArgumentError as exc:
        print(f"refused before any driver call: {exc}")

    print(
        f"Triton scaled_add[grid](...)        {per_launch_us(lambda: scaled_add[grid](x, y, out, n, 0.5, BLOCK=1024)):6.2f} us"
    )
    print(
        f"triton_launcher(scaled_add)[grid]   {per_launch_us(lambda: launcher[grid](x, y, out, n, 0.5, BLOCK=1024)):6.2f} us"
    )
    print(f"kernel[grid](...)                   {per_launch_us(lambda: kernel[grid](x, y, out, n, 0.5, 1024)):6.2f} us")
    print(
        f"kernel.launch(grid, None, ...)      {per_launch_us(lambda: kernel.launch(grid, None, x, y, out, n, 0.5, 1024)):6.2f} us"
    )


if __name__ == "__main__":
    main()
