"""cuTile kernels from cuTile's samples launched through launchpad on a GPU: against a torch
reference on random inputs, against ``ct.launch`` (bit for bit, same inputs), and through a saved
artifact.

Each kernel is compiled here where cuTile's compiler runs; otherwise launchpad takes the cubin
carried for the arguments' signature (``$LAUNCHPAD_CUTILE_CUBINS``, default ``.whl/cutile``;
``python tests/cutile_kernels.py DIR`` writes them where ``tileiras`` runs) and ``ct.launch`` is
made to load the same cubin (:func:`launchpad.bench.cutile.carried_compile`). A test that can
do neither skips, naming the missing cubin.
"""

from __future__ import annotations

import pytest
import torch

ct = pytest.importorskip("cuda.tile", reason="cuTile (PyPI cuda-tile) is not installed")

from cutile_kernels import CASES  # noqa: E402

import launchpad  # noqa: E402
from launchpad.bench.cutile import build, carried_compile  # noqa: E402
from launchpad.bench.harness import Missing  # noqa: E402
from launchpad.frontends.cutile import signature as cutile_signature  # noqa: E402

pytestmark = pytest.mark.gpu
IDS = [c.name for c in CASES]


def made(case, seed=0):
    args, grid, expected = case.make("cuda", torch.Generator().manual_seed(seed))
    try:
        kernel, how = build(case.kernel, args)
    except Missing as exc:
        pytest.skip(str(exc))
    return kernel, how, args, grid, expected


def check(case, args, expected):
    torch.cuda.synchronize()
    for position, want in expected.items():
        torch.testing.assert_close(args[position], want, atol=case.atol, rtol=case.rtol)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_matches_torch(case, compiled):
    kernel, _, args, grid, expected = made(case)
    if not compiled:
        kernel = type(kernel)(kernel.spec, compiled=False)
    kernel[grid](*args)
    check(case, args, expected)
    # new inputs, same kernel: nothing of the first launch is reused
    args2, grid2, expected2 = case.make("cuda", torch.Generator().manual_seed(1))
    kernel[grid2](*args2)
    check(case, args2, expected2)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bits_equal_ct_launch(case):
    kernel, how, args, grid, _ = made(case)
    outputs = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    theirs = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    undo = carried_compile(case.kernel)
    try:
        ct.launch(torch.cuda.current_stream(), grid, case.kernel, tuple(theirs))
    except FileNotFoundError as exc:  # ct.launch asked for a signature that is not carried
        pytest.skip(f"ct.launch cannot run here: {exc}")
    finally:
        if undo is not None:
            undo()
    kernel[grid](*args)
    torch.cuda.synchronize()
    for i in outputs:
        assert torch.equal(args[i], theirs[i]), f"argument {i} differs from ct.launch's ({how})"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_signature_rules_match_cutiles(case):
    """launchpad's own derivation (used where no CUDA driver loads, e.g. to carry cubins) gives the
    signature cuTile's ``KernelSignature.from_kernel_args`` gives on the GPU."""
    from cuda.tile.compilation import CallingConvention, KernelSignature

    args, _, _ = case.make("cuda", torch.Generator().manual_seed(0))
    v2 = CallingConvention.cutile_python_v2()
    theirs = KernelSignature.from_kernel_args(case.kernel, args, v2).parameters
    ours = tuple(cutile_signature._derive(case.kernel, args, True))
    assert ours == theirs


def test_saved_artifact_launches_the_same():
    case = CASES[0]
    kernel, _, args, grid, expected = made(case)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "k.json"
        kernel.save(path)
        loaded = launchpad.load(path)
    loaded[grid](*args)
    check(case, args, expected)


def test_bound_launch_and_refusal_on_device():
    case = CASES[0]
    kernel, _, args, grid, expected = made(case)
    a, b, c, tile = args
    bound = kernel.bind(grid, None, a, b, c, tile)
    bound()
    check(case, args, expected)
    with pytest.raises(launchpad.ArgumentError, match=r"argument 0 \('a'\).*not 16-byte aligned"):
        kernel[grid](torch.randn(a.numel() + 1, device="cuda")[1:], b, c)
    with pytest.raises(launchpad.ArgumentError, match=r"expected a CUDA tensor"):
        kernel[grid](a.cpu(), b, c)
