"""A GPT-2 training step recorded by ``launchpad.record`` and replayed with a new batch each step,
checked bit for bit against an eager twin.

The step as it is written for eager training: ``zero_grad(set_to_none=True)``, the forward with the
LM loss, ``backward()``, ``AdamW.step()`` (``capturable=True``: its step count stays on the GPU).
``record`` runs it once for real (one optimizer step), then records it; each replay takes a new
batch, trains the same weights in place, and returns a new loss tensor. A 4-layer GPT-2 with
random weights, built from a config (nothing is downloaded), no dropout.

Run: ``python examples/record_gpt2_training.py`` (needs ``transformers``:
``pip install 'launchpad-kernels[models]'``). Without a GPU it runs one eager step of both twins on
the CPU and records nothing.
"""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import launchpad as lp

STEPS = 10


def trainer(config: GPT2Config, device: str):
    torch.manual_seed(0)  # both twins start from the same weights
    model = GPT2LMHeadModel(config).to(device)
    model.loss_type = "ForCausalLM"  # the loss of its LM head (transformers warns where it must guess)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True, capturable=device == "cuda")

    def step(ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        return loss.detach()

    return model, step


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = GPT2Config(vocab_size=16384, n_positions=256, n_embd=512, n_layer=4, n_head=8, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)  # fmt: skip
    gen = torch.Generator().manual_seed(1)
    batches = [tuple(torch.randint(0, config.vocab_size, (8, 256), generator=gen).to(device) for _ in range(2))
               for _ in range(STEPS + 1)]  # fmt: skip
    model, step = trainer(config, device)
    twin, eager_step = trainer(config, device)
    if device == "cpu":
        assert torch.equal(step(*batches[0]), eager_step(*batches[0]))
        print("no GPU: one eager training step of both twins on the CPU; recorded nothing")
        return
    train = lp.record(step, *batches[0])  # the warm-up is one real step on batches[0]
    eager_step(*batches[0])  # the twin takes the same step
    for ids, labels in batches[1:]:
        loss, want = train(ids, labels), eager_step(ids, labels)
        assert torch.equal(loss, want), (float(loss), float(want))
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p, q)
    print(f"{train!r}")
    print(f"{STEPS} replays: losses ({float(want):.4f} last) and weights equal the eager twin's bit for bit")


if __name__ == "__main__":
    main()
