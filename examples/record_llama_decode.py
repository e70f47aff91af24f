"""Greedy decoding with a Llama and its ``StaticCache``: the step compiled by ``torch.compile`` in
the default mode, then recorded by ``launchpad.record``.

``torch.compile`` fuses the step's kernels (Inductor's Triton kernels) but launches them one by one
from Python; ``mode="reduce-overhead"``, the recipe transformers documents for a static cache,
replays them as a CUDA graph at a high host cost per step. ``launchpad.record`` of the compiled
step has both: Inductor's kernels, replayed as one graph whose token and position inputs are
re-pointed each step, with a new output each time. Its tokens are the compiled function's.

A 4-layer Llama with random weights, built from a config (nothing is downloaded), bf16, a
4,096-token static cache.

Run: ``python examples/record_llama_decode.py`` (needs ``transformers``:
``pip install 'launchpad-kernels[models]'``). Without a GPU it runs one eager step on the CPU and
records nothing.
"""

from __future__ import annotations

import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

import launchpad as lp

CACHE_LEN, TOKENS = 4096, 32


def main() -> None:
    gpu = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=CACHE_LEN)  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    cache = StaticCache(config=config, max_cache_len=CACHE_LEN)

    @torch.no_grad()
    def step(ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """One token: ``ids`` (1, 1) at position ``pos`` (1,) into the cache; the next token back."""
        out = model(input_ids=ids, past_key_values=cache, cache_position=pos, position_ids=pos.unsqueeze(0))
        return out.logits[:, -1].argmax(-1, keepdim=True)

    first = torch.tensor([[1]], device=device)
    positions = [torch.tensor([i], device=device) for i in range(TOKENS)]  # a tensor each: aligned as recorded
    if not gpu:
        print(
            f"no GPU: one eager decode step on the CPU (next token {int(step(first, positions[0]))}); recorded nothing"
        )
        return

    def greedy(fn) -> tuple[torch.Tensor, float]:
        cache.reset()
        ids, tokens = first, []
        torch.cuda.synchronize()
        start = time.perf_counter()
        for pos in positions:
            ids = fn(ids, pos)  # the token chosen stays on the GPU: no synchronization per token
            tokens.append(ids)
        torch.cuda.synchronize()
        return torch.cat(tokens, 1), (time.perf_counter() - start) / TOKENS * 1e6

    compiled = torch.compile(step)  # the default mode
    greedy(compiled)  # compiles
    seq = lp.record(compiled, first, positions[0])  # runs it once, then records its kernels
    want, compiled_us = greedy(compiled)
    got, recorded_us = greedy(seq)
    assert torch.equal(got, want), (got, want)
    print(f"{seq!r}")
    print(f"{TOKENS} tokens: {compiled_us:.0f} us a token compiled, {recorded_us:.0f} us recorded")
    print("the recorded compiled step's tokens equal the compiled step's")


if __name__ == "__main__":
    main()
