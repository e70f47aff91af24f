"""Compile, cache and import times.

- NVRTC compile of a small and a larger C++ kernel through ``launchpad.compile_cuda``, each
  sample into a fresh cache directory (a miss), in a process that has already compiled once (the
  first compile, which also loads NVRTC and imports cuda.core, is reported on its own);
- a disk-cache hit in a fresh process: a subprocess imports torch and launchpad, then times the
  ``compile_cuda`` call alone against a cache the parent filled (checked to be a hit);
- ``import launchpad`` on top of ``import torch``, in the same fresh subprocesses;
- loading a saved artifact (``launchpad.load``), and with a GPU loading it into the device;
- Triton and Numba compiles through launchpad (``from_triton(jit_fn, ...)``, ``from_numba``), with
  fresh Triton and launchpad cache directories;
- opt-in (``--load-inline``, tens of seconds): torch's ``load_inline`` of the same kernel.

Each result is a record ``{"label", "status", "samples_s", "stats"}`` or ``status: "missing"``
with the reason. None of this needs a GPU except loading into the device and ``load_inline``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .harness import Missing, describe, summarize

SMALL_SOURCE = r"""
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""
SMALL_NAME = "scale"

# A tiled GEMM template with fp16 and bf16 instances: headers, templates, shared memory.
LARGE_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

template <typename T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T, int TILE>
__global__ void gemm(const T* __restrict__ a, const T* __restrict__ b, float* __restrict__ c,
                     int m, int n, int k, float alpha, float beta) {
    __shared__ float as[TILE][TILE + 1];
    __shared__ float bs[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < k; t += TILE) {
        as[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? to_float(a[row * k + t + threadIdx.x]) : 0.0f;
        bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? to_float(b[(t + threadIdx.y) * n + col]) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < TILE; ++i) acc += as[threadIdx.y][i] * bs[i][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = alpha * acc + beta * c[row * n + col];
}

template <typename T>
__global__ void softmax_rows(const T* __restrict__ x, float* __restrict__ y, int cols) {
    extern __shared__ float buf[];
    const T* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    float m = -3.402823466e38f;  // -FLT_MAX: NVRTC has no <cmath> INFINITY without extra headers
    for (int i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, to_float(xr[i]));
    buf[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + s]);
        __syncthreads();
    }
    m = buf[0];
    __syncthreads();
    float sum = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) sum += __expf(to_float(xr[i]) - m);
    buf[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    for (int i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = __expf(to_float(xr[i]) - m) / buf[0];
}

template __global__ void gemm<__half, 32>(const __half*, const __half*, float*, int, int, int, float, float);
template __global__ void softmax_rows<__nv_bfloat16>(const __nv_bfloat16*, float*, int);
"""
LARGE_NAME = "gemm<__half, 32>"

# Run in a fresh interpreter: what a new process pays to import launchpad and to get a cached kernel.
CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import launchpad
t2 = time.perf_counter()
out = {"import_torch_s": t1 - t0, "import_launchpad_s": t2 - t1}
launchpad.compile_cuda  # first use: the C++ front end, the Kernel and the launch layer load (PEP 562)
out["first_use_s"] = time.perf_counter() - t2
spec = json.loads(sys.argv[1])
if spec:
    try:
        t3 = time.perf_counter()
        launchpad.compile_cuda(spec["source"], spec["name"], arch=spec["arch"])
        out["cache_hit_s"] = time.perf_counter() - t3
    except Exception as exc:
        out["cache_hit_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""

LOAD_INLINE_CUDA = r"""
__global__ void double_it(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f;
}

void double_it_launch(torch::Tensor x, torch::Tensor y) {
    int n = x.numel();
    double_it<<<(n + 1023) / 1024, 1024>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
}
"""
LOAD_INLINE_CPP = "void double_it_launch(torch::Tensor x, torch::Tensor y);"


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    """Set environment variables for the duration of the block (launchpad and Triton read their
    cache directories from the environment on every compile)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def fresh_caches() -> Iterator[Path]:
    """Empty launchpad and Triton cache directories: every compile in the block is a miss."""
    with tempfile.TemporaryDirectory(prefix="lp-bench-cache-") as d:
        with environ(LAUNCHPAD_CACHE_DIR=str(Path(d) / "launchpad"), TRITON_CACHE_DIR=str(Path(d) / "triton")):
            yield Path(d)


def ok_record(label: str, samples: list[float], note: str = "") -> dict[str, Any]:
    record: dict[str, Any] = {"label": label, "status": "ok", "samples_s": samples, "stats": summarize(samples)}
    if note:
        record["note"] = note
    return record


def missing_record(label: str, reason: str) -> dict[str, Any]:
    return {"label": label, "status": "missing", "reason": reason}


def timed_samples(fn: Callable[[], Any], repeats: int, *, fresh: bool = True) -> list[float]:
    """Wall time of ``fn()`` per repeat, each in fresh cache directories when ``fresh``."""
    out = []
    for _ in range(repeats):
        with fresh_caches() if fresh else contextlib.nullcontext():
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return out


def _measure(results: dict[str, dict[str, Any]], key: str, label: str, body: Callable[[], dict[str, Any]],
             log: Callable[[str], None]) -> None:  # fmt: skip
    """Run one measurement; anything it raises makes it missing with the reason."""
    try:
        results[key] = body()
    except Exception as exc:
        results[key] = missing_record(label, describe(exc))
    r = results[key]
    if r["status"] == "ok":
        log(f"  {label:<58} {r['stats']['median'] * 1000:9.1f} ms (median of {r['stats']['n']})")
    else:
        log(f"  {label:<58} missing: {r['reason']}")


def measure_compile(*, arch: str, gpu: bool, repeats: int, load_inline: bool,
                    log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:  # fmt: skip
    """The in-process compile and load measurements (see the module docstring)."""
    import launchpad

    results: dict[str, dict[str, Any]] = {}
    compile_small = lambda: launchpad.compile_cuda(SMALL_SOURCE, SMALL_NAME, arch=arch)

    def first() -> dict[str, Any]:
        return ok_record("NVRTC compile, first in the process", timed_samples(compile_small, 1),
                         "includes importing cuda.core and loading NVRTC")  # fmt: skip

    _measure(results, "nvrtc_first", "NVRTC compile, first in the process", first, log)
    _measure(results, "nvrtc_small", "NVRTC compile, small kernel",
             lambda: ok_record("NVRTC compile, small kernel", timed_samples(compile_small, repeats)), log)  # fmt: skip
    compile_large = lambda: launchpad.compile_cuda(LARGE_SOURCE, LARGE_NAME, arch=arch)
    _measure(results, "nvrtc_large", "NVRTC compile, larger kernel (templates, fp16/bf16)",
             lambda: ok_record("NVRTC compile, larger kernel (templates, fp16/bf16)",
                               timed_samples(compile_large, max(1, repeats // 2))), log)  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="lp-bench-artifact-") as d:
        path = Path(d) / "scale.json"

        def artifact() -> dict[str, Any]:
            with fresh_caches():
                compile_small().save(path)
            return ok_record("load a saved artifact (launchpad.load)",
                             timed_samples(lambda: launchpad.load(path), repeats * 4, fresh=False))  # fmt: skip

        _measure(results, "artifact_load", "load a saved artifact (launchpad.load)", artifact, log)
        if gpu:

            def artifact_device() -> dict[str, Any]:
                if not path.exists():
                    raise Missing("no artifact (saving it failed)")
                launchpad.load(path).load()  # warm-up: the first load also creates torch's CUDA context
                return ok_record("load a saved artifact into the GPU (load(path).load())",
                                 timed_samples(lambda: launchpad.load(path).load(), repeats * 4, fresh=False))  # fmt: skip

            _measure(results, "artifact_load_device", "load a saved artifact into the GPU (load(path).load())",
                     artifact_device, log)  # fmt: skip

    _measure(results, "triton_compile", "Triton compile through launchpad.from_triton(jit_fn, ...)",
             lambda: _triton_compile(repeats, None if gpu else int(arch[3:])), log)  # fmt: skip
    _measure(results, "numba_compile", "Numba compile through launchpad.from_numba(fn, sig)",
             lambda: _numba_compile(repeats, arch), log)  # fmt: skip
    if load_inline:
        _measure(results, "load_inline", "torch load_inline of the same kernel", lambda: _load_inline(arch), log)
    else:
        results["load_inline"] = missing_record(
            "torch load_inline of the same kernel", "not run (opt in with --load-inline)"
        )
    return results


def _triton_compile(repeats: int, target: int | None) -> dict[str, Any]:
    """``from_triton(jit_fn, signature=..., ...)``; ``target`` None compiles for the current GPU."""
    import launchpad

    try:
        from . import _triton_kernels
    except Exception as exc:
        raise Missing(f"triton: {describe(exc)}") from None
    fn = _triton_kernels.double_it
    # launchpad's signature words; a front end that wants Triton's {name: type} form gets that instead
    forms: list[Any] = ["*fp32, *fp32, i32", {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}]
    compile_with = None
    for form in forms:
        compile_with = lambda form=form: launchpad.from_triton(
            fn, signature=form, constexprs={"BLOCK": 1024}, num_warps=4, target=target
        )
        try:
            with fresh_caches():
                compile_with()  # warm-up: loads Triton's compiler and LLVM
            break
        except (TypeError, ValueError):
            if form is forms[-1]:
                raise
    assert compile_with is not None
    return ok_record("Triton compile through launchpad.from_triton(jit_fn, ...)", timed_samples(compile_with, repeats),
                     "fresh Triton and launchpad cache directories; after one warm-up compile")  # fmt: skip


def _numba_compile(repeats: int, arch: str) -> dict[str, Any]:
    import launchpad

    from .launchers import NUMBA_SIGNATURE

    try:
        from . import _numba_kernels
    except Exception as exc:
        raise Missing(f"numba-cuda: {describe(exc)}") from None
    compile_once = lambda: launchpad.from_numba(_numba_kernels.double_it, NUMBA_SIGNATURE, arch=arch)
    with fresh_caches():
        compile_once()  # warm-up: initializes Numba's CUDA target
    return ok_record("Numba compile through launchpad.from_numba(fn, sig)", timed_samples(compile_once, repeats),
                     "fresh launchpad cache directory; after one warm-up compile")  # fmt: skip


def _load_inline(arch: str) -> dict[str, Any]:
    import uuid

    from torch.utils.cpp_extension import load_inline

    digits = arch.split("_", 1)[1]
    arch_list = f"{digits[:-1]}.{digits[-1]}"
    with tempfile.TemporaryDirectory(prefix="lp-bench-inline-") as d, environ(TORCH_CUDA_ARCH_LIST=arch_list):
        t0 = time.perf_counter()
        load_inline(
            name=f"lp_bench_{uuid.uuid4().hex[:8]}", cpp_sources=LOAD_INLINE_CPP, cuda_sources=LOAD_INLINE_CUDA,
            functions=["double_it_launch"], build_directory=d, verbose=False,
        )  # fmt: skip
        elapsed = time.perf_counter() - t0
    return ok_record(
        "torch load_inline of the same kernel", [elapsed], f"TORCH_CUDA_ARCH_LIST={arch_list}, fresh build dir"
    )


def measure_fresh_process(*, arch: str, repeats: int, cache_hit: bool,
                          log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:  # fmt: skip
    """``import launchpad`` after ``import torch``, and a cache hit, each in fresh subprocesses.

    One extra subprocess runs first and is discarded: it warms the OS file cache and writes
    the bytecode caches, which a user's second run finds too.
    """
    import launchpad

    root = Path(launchpad.__file__).resolve().parents[1]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="lp-bench-fresh-") as d:
        cache = Path(d) / "cache"
        spec: dict[str, Any] = {}
        hit_error = None
        if cache_hit:
            try:
                with environ(LAUNCHPAD_CACHE_DIR=str(cache)):
                    launchpad.compile_cuda(SMALL_SOURCE, SMALL_NAME, arch=arch)
                spec = {"source": SMALL_SOURCE, "name": SMALL_NAME, "arch": arch}
            except Exception as exc:
                hit_error = f"filling the cache failed: {describe(exc)}"
        env = dict(os.environ, LAUNCHPAD_CACHE_DIR=str(cache))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
        imports, first_uses, hits = [], [], []
        entries = lambda: sorted(cache.glob("*")) if cache.is_dir() else []
        before = entries()
        for i in range(repeats + 1):
            proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True,
                                  env=env, timeout=600)  # fmt: skip
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"the fresh-process child failed (exit {proc.returncode}): {tail}")
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            if "cache_hit_error" in out:
                hit_error = out["cache_hit_error"]
            if i == 0:
                continue
            imports.append(out["import_launchpad_s"])
            first_uses.append(out["import_launchpad_s"] + out["first_use_s"])
            if "cache_hit_s" in out:
                hits.append(out["cache_hit_s"])
        if cache_hit and hits and entries() != before:
            hit_error, hits = "the child compiled instead of hitting the cache (a new cache entry appeared)", []
    results["import_launchpad"] = ok_record("import launchpad after import torch (fresh process)", imports)
    results["import_first_use"] = ok_record(
        "import launchpad, then its first use (lp.compile_cuda)", first_uses,
        "the front end, the Kernel and the launch layer load on first use",
    )  # fmt: skip
    if cache_hit:
        label = "disk-cache hit in a fresh process (compile_cuda call)"
        results["cache_hit"] = (
            ok_record(label, hits, "arch given, so no driver call")
            if hits
            else missing_record(label, hit_error or "no samples")
        )
    for r in results.values():
        if r["status"] == "ok":
            log(f"  {r['label']:<58} {r['stats']['median'] * 1000:9.1f} ms (median of {r['stats']['n']})")
        else:
            log(f"  {r['label']:<58} missing: {r['reason']}")
    return results
