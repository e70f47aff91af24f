"""Recorded steps under torchrun, one scenario per run (``tests/test_sequence_distributed_gpu.py`` runs
them on one rank and on two)::

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node=2 tests/distributed_steps.py ddp

- ``ddp``: a DistributedDataParallel training step as a user writes it (DDP built on the default
  stream, record's own warm-up), 20 replays; loss and parameters bit for bit equal to an eager DDP
  twin that took the same steps (record's warm-ups are real steps).
- ``fsdp``: FSDP2 (``fully_shard``, AdamW capturable), record's one warm-up, 12 replays against an
  eager FSDP2 twin.
- ``tp``: a tensor-parallel greedy decode step (column- and row-parallel Linear, an all-reduce),
  10 tokens replayed against eager.
- ``teardown``: a sequence holding NCCL work is left alive; ``destroy_process_group`` returns
  (launchpad closes the sequence first). ``close``: the user closes it first.
- ``uncapturable``: a step with an all-reduce that cannot be captured is refused; the process group
  still works (an eager all-reduce, a recorded one) and is destroyed.

Each rank prints ``rank R: SCENARIO ok`` and, last, ``rank R: destroyed in S s``.
"""

from __future__ import annotations

import copy
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import launchpad as lp
from launchpad.sequences import distributed as _distributed

RANK = int(os.environ.get("LOCAL_RANK", "0"))


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                               torch.nn.Linear(64, 8)).cuda()  # fmt: skip


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator(device="cuda").manual_seed(100 + RANK)  # (each rank its own data, as DDP's)
    return [(torch.randn(16, 32, device="cuda", generator=g), torch.randn(16, 8, device="cuda", generator=g))
            for _ in range(n)]  # fmt: skip


def training_step(net: torch.nn.Module, opt: torch.optim.Optimizer):
    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def local(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if hasattr(p, "to_local") else p


def same(name: str, got: list, want: list, params: list, twin_params: list) -> None:
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(a, b), f"{name}: replay {i}: loss {a.item()!r} != eager {b.item()!r}"
    for i, (p, q) in enumerate(zip(params, twin_params, strict=True)):
        assert torch.equal(local(p), local(q)), f"{name}: parameter {i} differs from the eager twin's"


def ddp() -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    net = model()
    twin = DDP(copy.deepcopy(net), device_ids=[RANK])
    net = DDP(net, device_ids=[RANK])  # on the default stream, as a user builds it
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    data = batches(21)
    seq = lp.record(training_step(net, opt), *data[0])  # (record warms it up DDP_WARMUP times)
    got = [seq(x, y) for x, y in data[1:]]
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.05, momentum=0.9)
    twin_step = training_step(twin, twin_opt)
    for _ in range(_distributed.DDP_WARMUP):
        twin_step(*data[0])
    want = [twin_step(x, y) for x, y in data[1:]]
    torch.cuda.synchronize()
    same("ddp", got, want, list(net.parameters()), list(twin.parameters()))
    how = "reducer rebuilt on a side stream" if getattr(net, "_launchpad_stream", None) is not None else \
        "stale streams redirected"  # fmt: skip
    print(f"rank {RANK}: ddp {len(got)} replays, {seq.nodes} nodes, {seq.replay_path} replay, {how}", flush=True)


def fsdp() -> None:
    from torch.distributed.fsdp import fully_shard

    def sharded(net: torch.nn.Module) -> torch.nn.Module:
        for layer in net:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(net)
        return net

    net = model()
    twin = sharded(copy.deepcopy(net))
    net = sharded(net)  # on the default stream
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, capturable=True)
    data = batches(13)
    seq = lp.record(training_step(net, opt), *data[0])  # (one warm-up)
    got = [seq(x, y) for x, y in data[1:]]
    twin_step = training_step(twin, torch.optim.AdamW(twin.parameters(), lr=1e-3, capturable=True))
    twin_step(*data[0])
    want = [twin_step(x, y) for x, y in data[1:]]
    torch.cuda.synchronize()
    same("fsdp", got, want, list(net.parameters()), list(twin.parameters()))
    print(f"rank {RANK}: fsdp {len(got)} replays, {seq.nodes} nodes", flush=True)


def tp() -> None:
    world = dist.get_world_size()
    torch.manual_seed(0)  # (the same weights and tokens on every rank; each keeps its shard)
    vocab, d, h = 128, 64, 256
    emb = torch.randn(vocab, d, device="cuda") * 0.5
    w1 = (torch.randn(h, d, device="cuda") * 0.1).chunk(world, 0)[RANK].contiguous()  # column-parallel
    w2 = (torch.randn(d, h, device="cuda") * 0.1).chunk(world, 1)[RANK].contiguous()  # row-parallel

    def decode(token):
        x = emb[token]
        part = F.gelu(x @ w1.t()) @ w2.t()
        dist.all_reduce(part)
        logits = (x + part) @ emb.t()
        return logits.argmax(-1), logits

    start = torch.randint(0, vocab, (4,), device="cuda")
    seq = lp.record(decode, start)
    tok, ref = start, start
    for i in range(10):
        tok, logits = seq(tok)
        ref, ref_logits = decode(ref)
        assert torch.equal(tok, ref) and torch.equal(logits, ref_logits), f"tp: token {i} differs from eager"
    print(f"rank {RANK}: tp 10 tokens, {seq.nodes} nodes", flush=True)


def reduced(x):
    y = x * 2
    dist.all_reduce(y)
    return y + 1


def check_reduced(seq) -> None:
    x = torch.full((1024,), float(RANK + 1), device="cuda")
    total = sum(range(1, dist.get_world_size() + 1))
    assert torch.equal(seq(x), torch.full_like(x, 2.0 * total + 1)), "the recorded all-reduce is wrong"


def teardown() -> None:
    seq = lp.record(reduced, torch.ones(1024, device="cuda"))
    check_reduced(seq)
    tracked = seq in _distributed._LIVE
    # (on one rank NCCL launches no kernel for an in-place all-reduce: nothing to track or to wait on)
    assert tracked or dist.get_world_size() == 1, "a sequence holding NCCL work is not tracked"
    print(f"rank {RANK}: teardown with a live sequence, {'tracked' if tracked else 'no NCCL kernel in it'}", flush=True)
    globals()["kept_alive"] = seq  # (alive at destroy_process_group: launchpad must close it)


def close() -> None:
    seq = lp.record(reduced, torch.ones(1024, device="cuda"))
    check_reduced(seq)
    seq.close()
    globals()["kept_alive"] = seq


def uncapturable() -> None:
    def step(x):
        y = x * 2
        dist.all_reduce(y)
        torch.cuda.current_stream().query()  # not permitted while a stream captures
        return y

    try:
        lp.record(step, torch.ones(1024, device="cuda"))
    except lp.RecordError as exc:
        print(f"rank {RANK}: refused: {str(exc).splitlines()[0][:200]}", flush=True)
    else:
        raise AssertionError("a step that cannot be captured was recorded")
    t = torch.full((8,), float(RANK + 1), device="cuda")
    dist.all_reduce(t)
    assert torch.equal(t, torch.full_like(t, float(sum(range(1, dist.get_world_size() + 1)))))
    check_reduced(lp.record(reduced, torch.ones(1024, device="cuda")))


SCENARIOS = {"ddp": ddp, "fsdp": fsdp, "tp": tp, "teardown": teardown, "close": close, "uncapturable": uncapturable}


def main() -> None:
    torch.cuda.set_device(RANK)
    dist.init_process_group("nccl", device_id=torch.device("cuda", RANK))
    for name in sys.argv[1:]:
        SCENARIOS[name]()
        print(f"rank {RANK}: {name} ok", flush=True)
    torch.cuda.synchronize()
    start = time.perf_counter()
    dist.destroy_process_group()
    print(f"rank {RANK}: destroyed in {time.perf_counter() - start:.2f} s", flush=True)


if __name__ == "__main__":
    main()
