"""Large parameter blocks on a real GPU: C++ kernels taking 4 KB, 8 KB and 32,000-byte structs by
value, every element of the struct read, launched by both executors and as a bound launch, each
result against numpy's on random data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import launchpad as lp

pytestmark = pytest.mark.gpu

SOURCE = r"""
struct Big { float v[COUNT]; };
extern "C" __global__ void mix(const Big s, const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = s.v[i] * x[i] + s.v[COUNT - 1 - i];
}
"""


def reference(values: np.ndarray, x: torch.Tensor) -> torch.Tensor:
    v = torch.from_numpy(values).to(x.device)
    return v * x + v.flip(0)


@pytest.mark.parametrize("nbytes", [4096, 8192, 32000])
def test_by_value_structs_up_to_the_limit(nbytes, executor):
    count = nbytes // 4
    k = lp.compile_cuda(SOURCE, "mix", defines={"COUNT": count})
    k = lp.Kernel(k.spec, compiled=executor == "compiled")
    assert k.params[0].size == nbytes and k.spec.param_bytes == nbytes + 20
    rng = np.random.default_rng(nbytes)
    blocks = (count + 255) // 256
    for _ in range(3):
        values = rng.standard_normal(count, dtype=np.float32)
        x = torch.randn(count, device="cuda")
        out = torch.full_like(x, float("nan"))
        k[blocks, 256](values.tobytes(), x, out, count)
        torch.testing.assert_close(out, reference(values, x), rtol=1e-6, atol=1e-6)
    values = rng.standard_normal(count, dtype=np.float32)
    x = torch.randn(count, device="cuda")
    out = torch.full_like(x, float("nan"))
    bound = k.bind(blocks, 256, values.tobytes(), x, out, count)
    bound()
    torch.testing.assert_close(out, reference(values, x), rtol=1e-6, atol=1e-6)
    other = rng.standard_normal(count, dtype=np.float32)
    bound(other)  # new leading argument: a numpy array of the struct's bytes
    torch.testing.assert_close(out, reference(other, x), rtol=1e-6, atol=1e-6)
    torch.cuda.synchronize()
