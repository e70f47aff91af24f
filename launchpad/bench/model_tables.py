"""The real models of :mod:`launchpad.bench.sequence_models` run each in a process of its own
(:func:`models_apart`, what the sequence section calls), and their tables: per model, host and
wall time per step, their ratios to torch's graph after ``copy_``, and each variant's check."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import harness
from .report import ratio_text, us

__all__ = ["CHECK_STEPS", "MISSING", "MODELS", "check_text", "model_tables", "models_apart"]

MODELS = {
    "llama_decode": "Llama decode step: 4 layers, d_model 1024, 16 heads (4 KV heads), MLP 2816, vocabulary 32000, "
    "bf16, batch 1, one token a step, StaticCache of 4,096 tokens",
    "gpt2_training": "GPT-2 training step: 4 layers, d_model 512, 8 heads, vocabulary 16384, fp32, batch 8 of 256 "
    "tokens, no dropout, LM loss, AdamW(capturable=True, foreach=True)",
}
MISSING = "transformers is not installed (pip install 'launchpad-kernels[models]')"
CHECK_STEPS = 6


def check_text(check: dict[str, Any] | None) -> str:
    """A check in a table cell: ``"= eager, bit for bit"``, ``"2.1e-03 from eager, same tokens"``."""
    if not check:
        return ""
    against = {"compiled": "the compiled step"}.get(check["against"], check["against"])
    text = f"= {against}, bit for bit" if check["bit_identical"] else f"{check['max_rel_diff']:.1e} from {against}"
    if "same_tokens" in check and not check["bit_identical"]:
        text += ", same tokens" if check["same_tokens"] else ", other tokens"
    return text


def model_tables(models: dict[str, Any], head: str, table: Callable[..., str]) -> list[str]:
    """A table per model: host and wall time per step, their ratios to torch's graph after
    ``copy_``, and the check; "missing" without transformers."""
    if "missing" in models or "error" in models:
        return [f"{head}Real models\n\n" + (f"missing: {models['missing']}" if "missing" in models else
                                            f"not measured: {models['error']}")]  # fmt: skip
    parts = []
    for name, m in models.get("models", {}).items():
        if "error" in m:
            parts.append(f"{head}A real model: {name}\n\n{m['description']}. Not measured: {m['error']}")
            continue
        rows = []
        for rec in m["results"].values():
            if rec.get("status") != "ok" or "stats" not in rec:
                rows.append([rec["label"], f"{rec.get('status', 'missing')}: {rec.get('reason', '')}"])
                continue
            e2e, wall = rec.get("e2e", {}), harness.median_of(rec, "e2e")
            rows.append([rec["label"], us(rec["stats"]["median"], 1), us(wall, 1) if wall else "",
                         ratio_text((rec.get("ratio") or {}).get("median")),
                         ratio_text((e2e.get("ratio") or {}).get("median")), check_text(rec.get("check"))])  # fmt: skip
        caption = (f"{m['description']}; random weights from a config (transformers). Host: us per step of the host's "
                   f"work (median over {models['rounds']} batches of {models['batch']} steps); wall: us per step of "
                   f"{models['steps']} back-to-back steps closed by one synchronization. x graph: ratio to torch's "
                   f"CUDAGraph after copy_, same run. Check: {models['check_steps']} steps from the same state on the "
                   "same inputs, against eager or, for the recorded compiled step, the compiled step.")  # fmt: skip
        notes = [f"{rec['label']}: {rec['note']}" for rec in m["results"].values() if rec.get("note")]
        header = ["variant", "host us/step", "wall us/step", "host x graph", "wall x graph", "check"]
        parts.append(f"{head}A real model: {name}\n\n{caption}\n\n" + table(header, rows, align="lrrrrl")
                     + ("\n\nnotes: " + "; ".join(notes) if notes else ""))  # fmt: skip
    return parts


def models_apart(rounds: int, batch: int, log: Callable[[str], None]) -> dict[str, Any]:
    """:func:`measure_models`, each model in a process of its own (what one loses, the other keeps),
    with a third of the section's ``rounds`` and a quarter of its ``batch`` (a model's step is
    milliseconds, not microseconds); "missing" without ``transformers``, nothing started."""
    rounds, batch = max(5, rounds // 3), max(5, batch // 4)
    out: dict[str, Any] = {"check_steps": CHECK_STEPS, "rounds": rounds, "batch": batch, "steps": 20, "models": {}}
    if importlib.util.find_spec("transformers") is None:
        log(f"  real models: missing: {MISSING}")
        return {**out, "missing": MISSING}
    with tempfile.TemporaryDirectory(prefix="lp-models-") as tmp:
        for name in MODELS:
            path = Path(tmp) / f"{name}.json"
            command = [sys.executable, "-m", "launchpad.bench.sequence_models", "--rounds", str(rounds), "--batch",
                       str(batch), "--models", name, "--json", str(path)]  # fmt: skip
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=1500)
            except subprocess.TimeoutExpired:
                out["models"][name] = {"description": MODELS[name], "error": "its process ran past 25 minutes"}
                continue
            for line in done.stderr.splitlines():
                if line.startswith("  ") or line.startswith("a real model"):
                    log(line)
            if not path.exists():
                tail = " / ".join(done.stderr.strip().splitlines()[-3:])
                out["models"][name] = {"description": MODELS[name],
                                       "error": f"its process failed (exit {done.returncode}): {tail}"[:600]}  # fmt: skip
                continue
            out["models"].update(json.loads(path.read_text())["models"])
    return out
