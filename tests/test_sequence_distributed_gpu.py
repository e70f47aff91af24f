"""Recorded steps under torchrun, on one rank and on two (NCCL; two GPUs for the second).

Each scenario of ``tests/distributed_steps.py`` runs in its own ``torchrun --nproc-per-node=N``,
in a subprocess with a time limit: a hang (a process group whose destruction waits on a live CUDA
graph) fails the test. One rank runs on any GPU: NCCL's collectives, DDP's reducer and FSDP2's
all-gathers and reduce-scatters are all still there, captured and replayed, only no other GPU
takes part. Two ranks need two GPUs. Run with NCCL's NVLink multicast off (``NCCL_NVLS_ENABLE=0``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_nccl_available()),
                       reason="needs NCCL"),
]  # fmt: skip

ROOT = Path(__file__).resolve().parents[1]
#: Seconds a scenario may take, start-up included (the teardown itself takes well under one).
LIMIT = int(os.environ.get("LAUNCHPAD_TORCHRUN_LIMIT", "120"))


@pytest.fixture(params=[1, 2], ids=["1rank", "2ranks"])
def ranks(request) -> int:
    if torch.cuda.device_count() < request.param:
        pytest.skip(f"needs {request.param} GPUs")
    return request.param


def torchrun(scenario: str, tmp_path: Path, ranks: int) -> str:
    env = dict(os.environ)
    env.update(
        NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH")])),
        LAUNCHPAD_CACHE_DIR=str(tmp_path / "cache"), TRITON_CACHE_DIR=str(tmp_path / "triton"),
    )  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               str(ROOT / "tests" / "distributed_steps.py"), scenario]  # fmt: skip
    # (its own session: a hang is killed with its workers)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)  # fmt: skip
    try:
        output, _ = process.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{scenario}: still running after {LIMIT} s (a hang)\n{output[-6000:]}")
    assert process.returncode == 0, output[-12000:]
    for rank in range(ranks):
        assert f"rank {rank}: {scenario} ok" in output, output[-12000:]
        assert f"rank {rank}: destroyed in" in output, output[-12000:]
    return output


def test_ddp_step_as_a_user_writes_it(tmp_path, ranks):
    """DDP built on the default stream, record's own warm-up: 20 replays per rank equal an eager twin."""
    output = torchrun("ddp", tmp_path, ranks)
    assert "ddp 20 replays" in output


def test_fsdp2_step(tmp_path, ranks):
    """FSDP2 (fully_shard, AdamW capturable), record's one warm-up: 12 replays equal an eager twin."""
    output = torchrun("fsdp", tmp_path, ranks)
    assert "fsdp 12 replays" in output


def test_tensor_parallel_decode(tmp_path, ranks):
    torchrun("tp", tmp_path, ranks)


def test_teardown_closes_live_sequences(tmp_path, ranks):
    """A sequence holding NCCL work left alive: destroy_process_group still returns."""
    torchrun("teardown", tmp_path, ranks)


def test_teardown_after_close(tmp_path, ranks):
    torchrun("close", tmp_path, ranks)


def test_uncapturable_step_leaves_the_group_usable(tmp_path, ranks):
    output = torchrun("uncapturable", tmp_path, ranks)
    assert "refused:" in output
