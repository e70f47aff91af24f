"""Autotuned Triton kernels and launch hooks on a real GPU: Triton's matmul tutorial through
``triton_launcher`` against torch, and the hook metadata launchpad passes against Triton's own."""

from __future__ import annotations

import pytest
import torch

import launchpad

triton = pytest.importorskip("triton")
import tutorial_matmul  # noqa: E402
from test_triton_hooks import SEEN, hooks, profiled_add, recorder  # noqa: E402

pytestmark = pytest.mark.gpu


def reference(a: torch.Tensor, b: torch.Tensor, activation: str) -> torch.Tensor:
    c = a.float() @ b.float()
    if activation == "leaky_relu":
        c = torch.nn.functional.leaky_relu(c, 0.01)
    return c.half()


@pytest.mark.parametrize(("m", "n", "k"), [(512, 512, 512), (300, 200, 136)])
@pytest.mark.parametrize("activation", ["leaky_relu", ""])
def test_tutorial_matmul_matches_torch(m, n, k, activation):
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    launcher = launchpad.triton_launcher(tutorial_matmul.matmul_kernel)
    ours = tutorial_matmul.matmul(launcher, a, b, activation)
    torch.testing.assert_close(ours, reference(a, b, activation), atol=1e-2, rtol=1e-2)
    tuned = launcher.cache[(m, n, k, "torch.float16", "torch.float16", "torch.float16")]
    assert launcher.best_config is tuned and len(launcher.configs_timings) == 8
    # tuned: later calls take the cached config, through the compiled dispatcher where it is built
    again = tutorial_matmul.matmul(launcher, a, b, activation)
    torch.testing.assert_close(again, ours, atol=0, rtol=0)
    run = launcher._launcher(tuned).run
    assert type(run).__name__ == ("Dispatcher" if launchpad.launch_path()[0] == "compiled" else "method")
    theirs = tutorial_matmul.matmul(tutorial_matmul.matmul_kernel, a, b, activation)  # Triton's own launch
    torch.testing.assert_close(theirs, reference(a, b, activation), atol=1e-2, rtol=1e-2)


def test_hooks_pass_what_triton_passes():
    SEEN.clear()
    n = 5000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    launcher = launchpad.triton_launcher(profiled_add)
    grid = (triton.cdiv(n, 1024),)
    with hooks(recorder("enter"), recorder("exit")):
        launcher[grid](x, y, out, n, BLOCK=1024)
        ours = list(SEEN)
        SEEN.clear()
        profiled_add[grid](x, y, out, n, BLOCK=1024)
        theirs = list(SEEN)
    torch.testing.assert_close(out, x + y)

    def without_function(seen):
        return [item if item[0] == "launch_metadata" else (item[0], {k: v for k, v in item[1].items() if k != "function"})
                for item in seen]  # fmt: skip

    assert without_function(ours) == without_function(theirs)  # the module handles differ, nothing else
    assert [s[0] for s in ours] == ["launch_metadata", "enter", "exit"]


_TUNE_IN_A_PROCESS = r"""
import json, sys
import torch, triton, triton.language as tl, triton.testing
import launchpad

timed = []

def counting_bench(fn, quantiles):
    timed.append(1)
    return triton.testing.do_bench(fn, quantiles=quantiles)

@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((256, 2), (512, 4), (1024, 8))],
                 key=["n"], do_bench=counting_bench, cache_results=True)
@triton.jit
def tuned_scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)

torch.manual_seed(0)
x = torch.randn(100_000, device="cuda")
out = torch.full_like(x, float("nan"))
launcher = launchpad.triton_launcher(tuned_scale)
launcher[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, out, x.numel())
torch.testing.assert_close(out, x * 3.0)
print(json.dumps({"timed": len(timed), "best": launcher.best_config.kwargs}))
"""


def test_cache_results_spares_a_second_process_the_tuning(tmp_path):
    """``@triton.autotune(cache_results=True)`` under ``triton_launcher``: the first process times
    every config and leaves the timings in Triton's cache; a second process takes them from there
    and times nothing, as under Triton."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton"),
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))  # fmt: skip
    script = tmp_path / "tune_in_a_process.py"  # a file: Triton reads a jit function's source
    script.write_text(_TUNE_IN_A_PROCESS)
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    assert runs[0]["timed"] == 3 and runs[1]["timed"] == 0
    assert runs[1]["best"] == runs[0]["best"]
