"""Real models recorded: a Llama decode step with its ``StaticCache`` and a GPT-2 training step.

Built with ``transformers`` from small configurations with random weights (nothing is downloaded;
without ``transformers`` the part says "missing"). :data:`MODELS` says what each is. Variants,
each set up on a copy of its own (a cache, or weights and AdamW state) and checked before it is
timed: eager; torch's ``CUDAGraph`` of the step after ``copy_`` of the new inputs;
``torch.compile(mode="reduce-overhead")`` (what transformers documents for a static cache; the
forward and loss for training), with ``cudagraph_mark_step_begin()``; ``launchpad.record(step)``;
the step compiled by ``torch.compile`` in the default mode, and ``launchpad.record`` of that
compiled step. The check: the outputs of :data:`CHECK_STEPS` steps from the same state on the
same inputs (the decode step's logits, teacher-forced; the training losses) against eager's, the
record of the compiled step against the compiled function's (their tokens, and their bits).
Two figures per variant, as in the rest of the section: the host's cost per step and the wall
time per step of a GPU-bound loop; ratios to torch's graph after ``copy_``. Each model is measured
in a process of its own (:func:`.model_tables.models_apart`), its variants in phases (compiled ones last).
"""

from __future__ import annotations

import gc
import importlib.util
import itertools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import harness
from .harness import Entry, Failed, Missing, Timed, WrongResult
from .model_tables import CHECK_STEPS, MISSING, MODELS, check_text, model_tables
from .sequence_training import first_line

__all__ = ["MISSING", "MODELS", "Decode", "Training", "gpt2_config", "llama_config", "measure_models"]

CACHE_LEN = 4096
POOL = 8  # inputs in the rotation
# Tolerances relative to the largest output: the same kernels as eager (bf16 logits: one rounding of
# the largest is 4e-3; whether the bits are eager's is said apart); Inductor's kernels round otherwise.
RTOL = {"llama_decode": 1e-2, "gpt2_training": 1e-4}
COMPILE_RTOL = {"llama_decode": 1e-1, "gpt2_training": 1e-3}
GRAPH = "torch_graph"
VARIANTS = {
    "eager": "eager",
    GRAPH: "torch CUDAGraph after copy_ of the inputs",
    "record": "launchpad.record(step)",
    "compiled": "torch.compile(step) (default mode)",
    "record_compiled": "launchpad.record(torch.compile(step)) (default mode)",
    "reduce_overhead": "torch.compile(mode='reduce-overhead')",
}
PHASES = (("eager", GRAPH, "record"), ("compiled", "record_compiled"), ("reduce_overhead",))


def llama_config(layers: int = 4, hidden: int = 1024, vocab: int = 32000) -> Any:
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 11 // 4,
                      num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=4,
                      max_position_embeddings=CACHE_LEN)  # fmt: skip
    cfg._attn_implementation = "sdpa"
    return cfg


def gpt2_config(layers: int = 4, hidden: int = 512, vocab: int = 16384, positions: int = 256) -> Any:
    from transformers import GPT2Config

    cfg = GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=hidden, n_layer=layers, n_head=8,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)  # fmt: skip
    cfg._attn_implementation = "sdpa"
    return cfg


def _seeded(build: Callable[[], Any]) -> Any:
    """``build()`` with the global generator at seed 0, left as it was after."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(0)
        return build()


def _max_rel(out: Any, ref: Any) -> float:
    """The largest difference relative to the reference's largest magnitude."""
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


class _Workload:
    """What both models share: the inputs' rotation, each variant's check and the reference."""

    name = ""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.outputs: dict[str, Any] = {}  # each variant's check outputs (float64, CPU)
        self.checks: dict[str, dict[str, Any]] = {}
        self.inputs: list[tuple[Any, ...]] = []

    def fresh(self, mode: str | None = None) -> tuple[Callable[..., Any], Callable[[], None]]:
        """A step on a state of its own, and what resets that state in place; ``mode`` compiles it."""
        raise NotImplementedError

    def outputs_of(self, call: Callable[..., Any], reset: Callable[[], None]) -> Any:
        raise NotImplementedError

    def check(self, variant: str, call: Callable[..., Any], reset: Callable[[], None], against: str = "eager",
              rtol: float | None = None) -> dict[str, Any]:  # fmt: skip
        """Compare a variant's outputs with ``against``'s; raise :class:`WrongResult` beyond ``rtol``."""
        out = self.outputs_of(call, reset)
        self.outputs[variant] = out
        if variant == "eager":
            self.checks[variant] = {"against": "eager", "bit_identical": True, "max_rel_diff": 0.0}
            return self.checks[variant]
        if against not in self.outputs:
            raise Missing(f"nothing to check against: the {VARIANTS[against]} variant did not run")
        ref = self.outputs[against]
        rel = _max_rel(out, ref)
        same = bool(self.torch.equal(out, ref))
        check = {"against": against, "rtol": rtol, "max_rel_diff": rel, "bit_identical": same}
        check.update(self._tokens(out, ref))
        self.checks[variant] = check
        if rtol is not None and not rel <= rtol:
            raise WrongResult(f"wrong result: {rel:.1e} from {against} (tolerance {rtol:g})")
        return check

    def _tokens(self, out: Any, ref: Any) -> dict[str, Any]:
        return {}

    def timed(self, call: Callable[..., Any], note: str) -> Timed:
        inputs = itertools.cycle(self.inputs)
        return Timed(lambda: call(*next(inputs)), note=note)


class Decode(_Workload):
    """The Llama decode step: ``step(ids, pos) -> (next_ids, logits)`` writes the key and value of
    the token ``ids`` (shape ``(1, 1)``) at ``pos`` (shape ``(1,)``) in its ``StaticCache``."""

    name = "llama_decode"

    def __init__(self, device: str = "cuda", config: Any = None, cache_len: int = CACHE_LEN) -> None:
        super().__init__()
        torch = self.torch
        self.device, self.cache_len = device, cache_len
        self.config = config or llama_config()
        dtype = torch.bfloat16 if device != "cpu" else torch.float32
        from transformers import LlamaForCausalLM

        self.model = _seeded(lambda: LlamaForCausalLM(self.config)).to(device=device, dtype=dtype).eval()
        self.model.requires_grad_(False)
        gen = torch.Generator(device="cpu").manual_seed(1)
        start = cache_len // 2  # positions half way: attention reads a cache half full
        self.inputs = [(torch.randint(0, self.config.vocab_size, (1, 1), generator=gen).to(device),
                        torch.tensor([start + i], device=device)) for i in range(POOL)]  # fmt: skip

    def fresh(self, mode: str | None = None) -> tuple[Callable[..., Any], Callable[[], None]]:
        from transformers import StaticCache

        torch, model = self.torch, self.model
        cache = StaticCache(config=self.config, max_cache_len=self.cache_len)

        def step(ids: Any, pos: Any) -> Any:
            out = model(input_ids=ids, past_key_values=cache, cache_position=pos, position_ids=pos.unsqueeze(0),
                        use_cache=True)  # fmt: skip
            logits = out.logits[:, -1]
            return logits.argmax(-1, keepdim=True), logits

        with torch.no_grad():
            step(*self.inputs[0])  # the cache's tensors are made at the first update, outside any compile
        cache.reset()
        if mode is not None:
            step = torch.compile(step, mode=mode)
        return torch.no_grad()(step), cache.reset

    def outputs_of(self, call: Callable[..., Any], reset: Callable[[], None]) -> Any:
        """The logits of :data:`CHECK_STEPS` steps from an empty cache, tokens and positions
        0, 1, ... (teacher-forced: each step's input is fixed, whatever the last one chose)."""
        torch = self.torch
        reset()
        logits = []
        for i in range(CHECK_STEPS):
            ids = self.inputs[i % POOL][0]
            logits.append(call(ids, torch.tensor([i], device=self.device))[1].detach().clone())
        return torch.stack(logits).double().cpu()

    def _tokens(self, out: Any, ref: Any) -> dict[str, Any]:
        return {"same_tokens": bool(self.torch.equal(out.argmax(-1), ref.argmax(-1)))}


class Training(_Workload):
    """The GPT-2 training step: ``step(ids, labels) -> loss`` (zero_grad, LM loss, backward, AdamW)."""

    name = "gpt2_training"

    def __init__(self, device: str = "cuda", config: Any = None, batch: int = 8) -> None:
        super().__init__()
        torch = self.torch
        self.device, self.config = device, config or gpt2_config()
        from transformers import GPT2LMHeadModel

        self.template = _seeded(lambda: GPT2LMHeadModel(self.config)).to(device)
        self.template.loss_type = "ForCausalLM"  # what its LM head computes (transformers warns where it guesses)
        gen = torch.Generator(device="cpu").manual_seed(1)
        shape = (batch, self.config.n_positions)
        self.inputs = [tuple(torch.randint(0, self.config.vocab_size, shape, generator=gen).to(device)
                             for _ in range(2)) for _ in range(POOL)]  # fmt: skip
        self.trainers: list[Any] = []  # held: graphs read and write their weights and AdamW state

    def fresh(self, mode: str | None = None) -> tuple[Callable[..., Any], Callable[[], None]]:
        import copy

        torch = self.torch
        model = copy.deepcopy(self.template).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True, capturable=self.device != "cpu")

        def forward_loss(ids: Any, labels: Any) -> Any:
            return model(input_ids=ids, labels=labels).loss

        loss_of = forward_loss if mode is None else torch.compile(forward_loss, mode=mode)

        def step(ids: Any, labels: Any) -> Any:
            opt.zero_grad(set_to_none=True)
            loss = loss_of(ids, labels)
            loss.backward()
            opt.step()
            return loss.detach()

        def reset() -> None:
            with torch.no_grad():
                for p, p0 in zip(model.parameters(), self.template.parameters()):
                    p.copy_(p0)
                for state in opt.state.values():
                    for value in state.values():
                        if isinstance(value, torch.Tensor):
                            value.zero_()

        self.trainers.append((model, opt))
        return step, reset

    def outputs_of(self, call: Callable[..., Any], reset: Callable[[], None]) -> Any:
        """The losses of :data:`CHECK_STEPS` steps from the initial weights on the first batches."""
        reset()
        losses = [call(*self.inputs[i % POOL]).detach().clone() for i in range(CHECK_STEPS)]
        return self.torch.stack(losses).double().cpu()


# --- the variants ----------------------------------------------------------------------------------


def _variant(work: _Workload, variant: str) -> Timed:
    import launchpad

    torch, rtol, crtol = work.torch, RTOL[work.name], COMPILE_RTOL[work.name]
    if variant == "eager":
        step, reset = work.fresh()
        work.check(variant, step, reset)
        return work.timed(step, "the step as written")
    if variant == GRAPH:
        step, reset = work.fresh()
        static = [t.clone() for t in work.inputs[0]]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as torch's documentation does it
            for _ in range(3):
                step(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        getattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: None)()  # cuBLAS's workspace in the graph's pool
        with torch.cuda.graph(graph):
            out = step(*static)

        def replay(*args: Any, _held: Any = step) -> Any:  # the step held: its state lives as long as the graph
            for s, a in zip(static, args):
                s.copy_(a)
            graph.replay()
            return out

        work.check(variant, replay, reset, rtol=rtol)
        return work.timed(replay, "copy_ of each input into its static tensor, graph.replay(); the output is static")
    if variant in ("record", "record_compiled"):
        step, reset = work.fresh("default" if variant == "record_compiled" else None)
        seq = launchpad.record(step, *work.inputs[0])
        if variant == "record":
            work.check(variant, seq, reset, rtol=rtol)
        else:
            against = "compiled" if "compiled" in work.outputs else "eager"
            work.check(variant, seq, reset, against=against, rtol=rtol if against == "compiled" else crtol)
        updates = seq.update_note or "nodes updated from the device"
        return work.timed(seq, f"seq(*inputs): {seq!r}, {seq.replay_path} replay, {updates}")
    mode = "default" if variant == "compiled" else "reduce-overhead"
    step, reset = work.fresh(mode)

    def call(*args: Any) -> Any:
        if mode == "reduce-overhead":  # a new step: the last step's graph outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        return step(*args)

    for args in work.inputs[:3]:
        call(*args)
    work.check(variant, call, reset, rtol=crtol)
    marks = "; cudagraph_mark_step_begin() before each step" if mode == "reduce-overhead" else ""
    return work.timed(call, f"torch.compile(mode={mode!r}){marks}")


def model_entries(work: _Workload, variants: Sequence[str] = tuple(VARIANTS)) -> list[Entry]:
    def factory(variant: str) -> Callable[[Any], Timed]:
        def build(_ctx: Any) -> Timed:
            try:
                return _variant(work, variant)
            except (Missing, WrongResult):
                raise
            except Exception as exc:  # torch.compile unavailable, a RecordError, a failed capture...
                raise Failed(first_line(exc)) from None

        return build

    group = {"record": "launchpad", "record_compiled": "launchpad"}
    return [Entry(f"{work.name}_{v}", VARIANTS[v], group.get(v, "peer"), factory(v)) for v in variants]


# --- measurement and tables ------------------------------------------------------------------------


def measure_models(rounds: int, batch: int, log: Callable[[str], None] = print, *,
                   models: Sequence[str] = tuple(MODELS)) -> dict[str, Any]:  # fmt: skip
    """Check and time every variant of each model in this process (see the module documentation)."""
    out: dict[str, Any] = {"check_steps": CHECK_STEPS, "rounds": rounds, "batch": batch, "steps": 20, "models": {}}
    if importlib.util.find_spec("transformers") is None:
        return {**out, "missing": MISSING}
    import torch

    sync = torch.cuda.synchronize
    for name in models:
        log(f"a real model, {MODELS[name]}")
        try:
            work: _Workload = Decode() if name == "llama_decode" else Training()
            results: dict[str, Any] = {}
            for phase in PHASES:
                launchers, set_up = harness.set_up(model_entries(work, phase), None, sync=sync, log=log)
                results.update(set_up)
                samples, errors = harness.measure(launchers, rounds=rounds, batch=batch, warmup=batch, sync=sync)
                for lc in launchers:
                    harness.record_samples(results[lc.key], samples[lc.key], errors.get(lc.key))
                ready = [lc for lc in launchers if lc.key not in errors]
                walls, errors = harness.measure_e2e(ready, launches=out["steps"], repeats=max(5, rounds // 4),
                                                    sync=sync)  # fmt: skip
                for lc in ready:
                    harness.record_e2e(results[lc.key], walls[lc.key], errors.get(lc.key))
                del launchers, ready
                torch._dynamo.reset()  # the phase's compiled code and graph trees go before the next phase
                gc.collect()
                sync()
                torch.cuda.empty_cache()
            harness.add_ratios(results, f"{name}_{GRAPH}")
            for key, rec in results.items():
                if (check := work.checks.get(key.removeprefix(f"{name}_"))) is not None:
                    rec["check"] = check
                    log(f"  {rec['label']:<58} check: {check_text(check)}")
            out["models"][name] = {"description": MODELS[name], "results": results}
        except Exception as exc:
            out["models"][name] = {"description": MODELS[name], "error": first_line(exc)}
            log(f"  failed: {out['models'][name]['error']}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m launchpad.bench.sequence_models [--rounds N] [--batch N] [--models ...] [--json F]``:
    this part alone, in this process; tables on stdout, progress on stderr."""
    import argparse

    from .report import format_table

    p = argparse.ArgumentParser("python -m launchpad.bench.sequence_models", description="Real models recorded.")
    p.add_argument("--rounds", type=int, default=20, help="timed batches per variant (default 20)")
    p.add_argument("--batch", type=int, default=10, help="steps per timed batch (default 10)")
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    p.add_argument("--json", help="also write the results to this file (what the sequence section reads)")
    args = p.parse_args(argv)
    out = measure_models(max(1, args.rounds), max(1, args.batch), lambda s: print(s, file=sys.stderr, flush=True),
                         models=args.models)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, default=str))
    print("\n\n".join(model_tables(out, "", format_table)))
    return 1 if "missing" in out or any("error" in m for m in out["models"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
