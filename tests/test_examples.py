"""The examples run as their docstrings say: without a GPU each compiles for sm_90, describes what it
built and says it launched nothing (``examples/distributed.py`` under ``python`` and under
``torchrun`` too); on a GPU each launches and checks its results. Triton's warning about FP
fusion, which Triton 3.9 gives on every compile that leaves it to its default, is not among
what they print."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import launchpad

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HAS_GPU = torch.cuda.is_available()
NEEDS = {"triton_kernel.py": "triton", "numba_kernel.py": "numba.cuda", "distributed.py": "triton",
         "record_llama_decode.py": "transformers", "record_gpt2_training.py": "transformers"}  # fmt: skip
WITHOUT_A_GPU = {
    "cpp_kernel.py": "no GPU: compiled for sm_90 but not launched",
    "triton_kernel.py": "no GPU: compiled for sm_90 but not launched",
    "numba_kernel.py": "no GPU: compiled only",
    "distributed.py": "rank 0: no GPU: compiled for sm_90 but not launched",
    "record_llama_decode.py": "no GPU: one eager decode step on the CPU",
    "record_gpt2_training.py": "no GPU: one eager training step of both twins on the CPU",
}
ON_A_GPU = {
    "cpp_kernel.py": "reverse_scale<float>: OK",
    "triton_kernel.py": "refused before any driver call",
    "numba_kernel.py": "matches torch",
    "distributed.py": "rank 0: all-reduced C++ and Triton results match torch",
    "record_llama_decode.py": "the recorded compiled step's tokens equal the compiled step's",
    "record_gpt2_training.py": "10 replays: losses (",
}


def run(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DEFAULT_FP_FUSION"}  # as a user runs them
    env.update(TRITON_CACHE_DIR=str(tmp_path / "triton"), NCCL_NVLS_ENABLE="0")
    # The examples run in tmp_path: the launchpad under test (an install, or a checkout on a
    # relative PYTHONPATH such as the GPU machine's ``PYTHONPATH=.``) must still be the one imported.
    paths = [str(Path(launchpad.__file__).resolve().parents[1])]
    paths += [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def needs(name: str) -> None:
    if not EXAMPLES.is_dir():
        pytest.skip("no examples/ beside tests/")
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
@pytest.mark.parametrize("name", sorted(WITHOUT_A_GPU))
def test_examples_run_without_a_gpu(name, tmp_path):
    needs(name)
    done = run([sys.executable, str(EXAMPLES / name)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert WITHOUT_A_GPU[name] in done.stdout
    assert "TRITON_DEFAULT_FP_FUSION" not in done.stderr + done.stdout


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_the_distributed_example_under_torchrun_without_a_gpu(tmp_path):
    needs("distributed.py")
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("no torchrun")
    done = run([torchrun, "--nproc-per-node=2", str(EXAMPLES / "distributed.py")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank}: no GPU: compiled for sm_90 but not launched" in done.stdout
    assert "TRITON_DEFAULT_FP_FUSION" not in done.stderr + done.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(ON_A_GPU))
def test_examples_run_on_a_gpu(name, tmp_path):
    needs(name)
    done = run([sys.executable, str(EXAMPLES / name)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ON_A_GPU[name] in done.stdout
    assert "TRITON_DEFAULT_FP_FUSION" not in done.stderr + done.stdout
