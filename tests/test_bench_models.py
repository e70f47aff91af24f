"""The real models' part of the sequence section (``launchpad.bench.sequence_models``) without a GPU:
the models built from small configs with random weights, their steps run eagerly on the CPU, the
checks, the tables, and "missing" where ``transformers`` is absent (nothing started then)."""

from __future__ import annotations

import pytest
import torch

from launchpad.bench import harness, model_tables, report
from launchpad.bench import sequence_models as sm


def _decode():
    pytest.importorskip("transformers")
    return sm.Decode(device="cpu", config=sm.llama_config(layers=2, hidden=128, vocab=512), cache_len=64)


def _training():
    pytest.importorskip("transformers")
    return sm.Training(device="cpu", config=sm.gpt2_config(layers=2, hidden=64, vocab=256, positions=32), batch=2)


def test_the_decode_step_writes_its_static_cache_and_checks_against_eager():
    work = _decode()
    step, reset = work.fresh()
    assert work.check("eager", step, reset) == {"against": "eager", "bit_identical": True, "max_rel_diff": 0.0}
    assert work.outputs["eager"].shape == (sm.CHECK_STEPS, 1, 512)
    ids, pos = work.inputs[0]
    tokens, logits = step(ids, pos)
    assert tokens.shape == (1, 1) and logits.shape == (1, 512)
    twin, twin_reset = work.fresh()  # a cache of its own: the same outputs from the same state
    check = work.check("record", twin, twin_reset, rtol=sm.RTOL["llama_decode"])
    assert check["bit_identical"] and check["same_tokens"] and model_tables.check_text(check) == "= eager, bit for bit"
    with pytest.raises(harness.Missing, match="nothing to check against"):
        work.check("record_compiled", twin, twin_reset, against="compiled", rtol=0.0)
    with pytest.raises(harness.WrongResult, match="from eager"):
        work.check("reduce_overhead", lambda i, p: [o * 1.5 for o in twin(i, p)], twin_reset, rtol=1e-3)
    assert model_tables.check_text(work.checks["reduce_overhead"]).startswith("5.0e-01 from eager, same tokens")
    timed = work.timed(twin, "note")
    timed.run(sm.POOL + 1)  # the rotation wraps around


def test_the_training_step_resets_in_place_and_checks_against_eager():
    work = _training()
    step, reset = work.fresh()
    work.check("eager", step, reset)
    losses = work.outputs["eager"]
    assert losses.shape == (sm.CHECK_STEPS,) and bool((losses > 0).all())
    assert work.check("eager", step, reset)["bit_identical"] and bool((work.outputs["eager"] == losses).all())
    twin, twin_reset = work.fresh()
    assert work.check("record", twin, twin_reset, rtol=sm.RTOL["gpt2_training"])["bit_identical"]
    assert len(work.trainers) == 2  # held: a graph reads their weights and state


def test_a_variant_that_fails_is_a_row():
    work = _decode()
    ready, results = harness.set_up(sm.model_entries(work, ["eager", "torch_graph"]), None, log=lambda _: None)
    assert [lc.key for lc in ready] == ["llama_decode_eager"]
    # a peer's failure: "missing" without CUDA; with it, a graph of this CPU workload fails ("error")
    want = "error" if torch.cuda.is_available() else "missing"
    assert results["llama_decode_torch_graph"]["status"] == want
    assert results["llama_decode_torch_graph"]["reason"]


def _fake_models() -> dict:
    def rec(key, label, host, wall, check=None, status="ok"):
        out = {"key": key, "label": label, "group": "peer", "status": status, "note": f"{label} note"}
        if status == "ok":
            out.update(stats=harness.summarize([host]), e2e={"stats": harness.summarize([wall])})
        else:
            out["reason"] = "RecordError: no"
        if check:
            out["check"] = check
        return out

    results = {
        "llama_decode_eager": rec("e", "eager", 3000.0, 3100.0),
        "llama_decode_torch_graph": rec("g", "torch CUDAGraph after copy_ of the inputs", 30.0, 900.0,
                                        {"against": "eager", "bit_identical": True, "max_rel_diff": 0.0}),
        "llama_decode_record_compiled": rec("r", "launchpad.record(torch.compile(step))", 20.0, 800.0,
                                            {"against": "compiled", "bit_identical": True, "max_rel_diff": 0.0}),
        "llama_decode_record": rec("x", "launchpad.record(step)", 0, 0, status="error"),
    }  # fmt: skip
    harness.add_ratios(results, "llama_decode_torch_graph")
    return {"check_steps": 6, "rounds": 5, "batch": 5, "steps": 20,
            "models": {"llama_decode": {"description": "a Llama", "results": results},
                       "gpt2_training": {"description": "a GPT-2", "error": "OutOfMemoryError: no"}}}  # fmt: skip


def test_the_tables():
    text = "\n\n".join(model_tables.model_tables(_fake_models(), "### ", report.markdown_table))
    assert "### A real model: llama_decode" in text and "| variant | host us/step | wall us/step |" in text
    assert "= the compiled step, bit for bit" in text and "0.67x" in text and "0.89x" in text
    assert "error: RecordError: no" in text
    assert "### A real model: gpt2_training\n\na GPT-2. Not measured: OutOfMemoryError: no" in text
    assert model_tables.model_tables({"missing": sm.MISSING}, "", report.format_table) == [
        f"Real models\n\nmissing: {sm.MISSING}"]  # fmt: skip
    assert model_tables.model_tables({"error": "KeyError: 'x'"}, "", report.format_table) == [
        "Real models\n\nnot measured: KeyError: 'x'"]  # fmt: skip


def test_missing_without_transformers_and_nothing_started(monkeypatch):
    def no_spec(name, *args):
        assert name == "transformers"

    def no_process(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(model_tables.importlib.util, "find_spec", no_spec)
    monkeypatch.setattr(model_tables.subprocess, "run", no_process)
    lines: list[str] = []
    out = model_tables.models_apart(25, 20, lines.append)
    assert out["missing"] == sm.MISSING and out["models"] == {} and (out["rounds"], out["batch"]) == (8, 5)
    assert lines == [f"  real models: missing: {sm.MISSING}"]
    assert sm.measure_models(3, 4, lines.append)["missing"] == sm.MISSING
    assert sm.main(["--rounds", "1"]) == 1
