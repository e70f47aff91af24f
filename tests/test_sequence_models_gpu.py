"""Real models recorded on a GPU (issue 35, point 4), built by ``transformers`` from small configs
with random weights (``launchpad.bench.sequence_models``): a Llama decode step with its
``StaticCache``, recorded as written and recorded after ``torch.compile`` in the default mode
(the documented combination: its tokens are the compiled function's), and a GPT-2 training step
recorded, 10 replays against an eager twin, bit for bit."""

from __future__ import annotations

import pytest
import torch

import launchpad as lp

pytestmark = pytest.mark.gpu
pytest.importorskip("transformers")

from launchpad.bench import sequence_models as sm  # noqa: E402  (after the skip)

TOKENS = 16


def greedy(work: sm.Decode, fn, reset) -> tuple[torch.Tensor, torch.Tensor]:
    """``TOKENS`` greedy tokens from an empty cache, and their logits."""
    reset()
    ids, tokens, logits = work.inputs[0][0], [], []
    positions = [torch.tensor([i], device="cuda") for i in range(TOKENS)]
    for pos in positions:
        ids, out = fn(ids, pos)
        tokens.append(ids)
        logits.append(out.clone())
    return torch.cat(tokens, 1), torch.stack(logits)


@pytest.fixture(scope="module")
def decode() -> sm.Decode:
    return sm.Decode()


@pytest.mark.parametrize("mode", [None, "default"])
def test_a_decode_step_recorded_gives_the_tokens_of_the_function_recorded(decode, mode):
    step, reset = decode.fresh(mode)
    want_tokens, want_logits = greedy(decode, step, reset)  # compiles, for "default"
    seq = lp.record(step, *decode.inputs[0])
    for _ in range(2):
        tokens, logits = greedy(decode, seq, reset)
        assert torch.equal(tokens, want_tokens), (tokens, want_tokens)
        assert torch.equal(logits, want_logits)
    del seq
    torch._dynamo.reset()


def test_the_compiled_decode_step_is_near_eager(decode):
    step, reset = decode.fresh()
    compiled, compiled_reset = decode.fresh("default")
    _, eager = greedy(decode, step, reset)
    _, fused = greedy(decode, compiled, compiled_reset)
    # bf16 through other kernels: the first token's logits stay close (later tokens may differ)
    assert float((fused[0] - eager[0]).abs().max() / eager[0].abs().max()) < sm.COMPILE_RTOL["llama_decode"]
    torch._dynamo.reset()


@pytest.fixture
def deterministic():
    """torch's deterministic algorithms (warnings only where there are none), as a bit-for-bit
    comparison of two compiled training steps needs: Inductor scatters the embeddings' gradients
    with atomic adds unless they are on (seen on an H100: two compiled twins of the GPT-2 step apart
    in the last bit of the second step's loss), and then falls back to torch's sorted scatter."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@pytest.mark.parametrize("mode", [None, "default"])
def test_a_gpt2_training_step_recorded_replays_as_its_twin_trains(mode, deterministic):
    work = sm.Training()
    step, _ = work.fresh(mode)
    twin, _ = work.fresh(mode)
    seq = lp.record(step, *work.inputs[0])  # the warm-up is one real step
    twin(*work.inputs[0])
    for i in range(10):
        batch = work.inputs[1 + i % (sm.POOL - 1)]
        loss, want = seq(*batch), twin(*batch)
        assert torch.equal(loss, want), (i, float(loss), float(want))
    (model, _), (twin_model, _) = work.trainers
    for p, q in zip(model.parameters(), twin_model.parameters()):
        assert torch.equal(p, q)
    torch._dynamo.reset()
