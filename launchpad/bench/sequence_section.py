"""The recorded sequences' section of the benchmarks: the 20-kernel step (:mod:`.sequences`), the
decode-like step (:mod:`.decode`), the inputs' size sweep (:mod:`.sequence_sizes`), a training
step per model (:mod:`.sequence_training`) and real models (:mod:`.sequence_models`), run and
rendered. Every launcher gets two figures: the host's cost, and the wall time of a GPU-bound loop.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .decode import decode_entries
from .harness import add_ratios, describe, measure, measure_e2e, record_e2e, record_samples, set_up
from .model_tables import model_tables, models_apart
from .report import launch_rows, ratio_text, us
from .sequence_sizes import measure_sizes
from .sequences import KERNELS, UPDATED, sequence_entries

__all__ = ["sequence_section", "sequence_tables"]


def sequence_section(ctx: Any, rounds: int, batch: int, log: Callable[[str], None]) -> dict[str, Any]:
    """The recorded sequences' figures (see the module documentation)."""
    import torch

    sync = torch.cuda.synchronize
    out: dict[str, Any] = {"floor": "c_floor", "kernels": KERNELS, "updated": list(UPDATED)}
    log(f"recorded sequences: a step of {KERNELS} kernels, 2 new tensors and 1 new scalar each")
    launchers, results = set_up(sequence_entries(), ctx, sync=sync, log=log)
    _host_and_wall(launchers, results, rounds, batch, sync, KERNELS * batch)
    add_ratios(results, "c_floor")
    out.update(kernel=f"out[j][i] = a * x[i] + y[i], 1024 floats, grid 1, block 1024, {KERNELS} kernels a step",
               results=results)  # fmt: skip
    log("a decode-like step (embeddings, layer norms, cuBLAS matmuls, a C++ and a Triton kernel)")
    launchers, decode = set_up(decode_entries(), ctx, sync=sync, log=log)
    _host_and_wall(launchers, decode, rounds, batch, sync, 20)
    out["decode"] = decode
    log("the inputs' size, 16 KB to 256 MB: GPU-bound wall time per step against torch's graph after copy_")
    out["sizes"] = measure_sizes(log=log)
    log("a training step (an MLP, a transformer block; AdamW): eager, torch's graph, torch.compile, launchpad.record")
    out["training"] = measure_training(rounds, batch, log)
    log("real models (transformers, random weights): a Llama decode step with its StaticCache, a GPT-2 training step")
    try:
        out["models"] = measure_models(rounds, batch, log)
    except Exception as exc:  # the part failing leaves the section's other figures
        out["models"] = {"error": describe(exc)}
    return out


def training_here(rounds: int, batch: int, log: Callable[[str], None]) -> dict[str, Any]:
    """The training step's figures, measured in this process (the tests' fake GPU)."""
    from . import sequence_training  # imported here: `python -m launchpad.bench.sequence_training` runs it alone

    try:
        return sequence_training.measure_training(rounds, batch, log)
    except Exception as exc:
        return {"error": describe(exc)}


def training_apart(rounds: int, batch: int, log: Callable[[str], None]) -> dict[str, Any]:
    """The training step's figures, each model measured in a process of its own: torch's hand-captured
    graphs and torch.compile's graph trees read illegal addresses in some orders in one process (torch
    2.11), and what the CUDA context loses there must take no other figures with it."""
    from .sequence_training import MODELS

    out: dict[str, Any] = {"models": {}}
    with tempfile.TemporaryDirectory(prefix="lp-training-") as tmp:
        for name in MODELS:
            path = Path(tmp) / f"{name}.json"
            command = [sys.executable, "-m", "launchpad.bench.sequence_training", "--rounds", str(rounds),
                       "--batch", str(batch), "--models", name, "--json", str(path)]  # fmt: skip
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
            except subprocess.TimeoutExpired:
                out["models"][name] = {"description": MODELS[name], "error": "its process ran past 30 minutes"}
                continue
            for line in done.stderr.splitlines():
                if line.startswith("  ") or line.startswith("a training step"):
                    log(line)
            if not path.exists():
                tail = " / ".join(done.stderr.strip().splitlines()[-3:])
                error = f"its process failed (exit {done.returncode}): {tail}"[:600]
                out["models"][name] = {"description": MODELS[name], "error": error}
                continue
            part = json.loads(path.read_text())
            out.update({k: v for k, v in part.items() if k != "models"})
            out["models"].update(part["models"])
    return out


measure_training = training_apart  # what the section runs (the tests: training_here)
measure_models = models_apart  # each model in a process of its own; "missing" without transformers


def _host_and_wall(launchers: list, results: dict[str, Any], rounds: int, batch: int, sync: Callable[[], None],
                   launches: int) -> None:  # fmt: skip
    """Both figures of each launcher: the host's cost (batches without a synchronization inside) and
    the wall time of a GPU-bound loop of ``launches`` kernels closed by one synchronization."""
    samples, errors = measure(launchers, rounds=rounds, batch=batch, warmup=batch, sync=sync)
    for lc in launchers:
        record_samples(results[lc.key], samples[lc.key], errors.get(lc.key))
    ready = [lc for lc in launchers if lc.key not in errors]
    walls, errors = measure_e2e(ready, launches=launches, repeats=max(5, rounds // 4), sync=sync)
    for lc in ready:
        record_e2e(results[lc.key], walls[lc.key], errors.get(lc.key))


def sequence_tables(seq: dict[str, Any], head: str, table: Callable[..., str]) -> list[str]:
    """The recorded sequences' tables: the 20-kernel step (host cost and GPU-bound wall time), the
    decode-like step against eager and torch's graphs, the inputs' size sweep, and a training step
    per model."""
    k = seq["kernels"]
    rows = []
    for r in launch_rows(seq["results"]):
        per_step = f"{float(r[4]) * k:.1f}" if len(r) > 4 and r[4] else ""
        rows.append([r[0], *r[1:4], per_step] if len(r) > 3 else r)
    parts = [f"{head}Recorded sequences\n\n{seq['kernel']}. Host: the host's cost per kernel (a step's time / {k}, "
             "batches without a synchronization inside) and its ratio to one C-floor launch of the same run. Wall: "
             "the time per step of a GPU-bound loop of steps closed by one synchronization (the GPU's own work, "
             "node updates included).\n\n"
             + table(["launcher", "host us/kernel", "p10-p90", "host x floor", "wall us/step"], rows)]  # fmt: skip
    decode = seq.get("decode") or {}
    if decode:
        graph = (decode.get("decode_torch_graph", {}).get("e2e", {}).get("stats") or {}).get("median")
        drows = []
        for rec in decode.values():
            if rec.get("status") != "ok" or "stats" not in rec:
                drows.append([rec["label"], f"{rec.get('status', 'missing')}: {rec.get('reason', '')}"])
                continue
            wall = (rec.get("e2e", {}).get("stats") or {}).get("median")
            drows.append([rec["label"], us(rec["stats"]["median"], 1), us(wall, 1),
                          ratio_text(wall / graph) if wall and graph else ""])  # fmt: skip
        parts.append(f"{head}A decode-like step\n\nHost: us per step of the host's work; wall: us per step of a "
                     "GPU-bound loop.\n\n" + table(["launcher", "host us/step", "wall us/step", "wall x torch graph"],
                                                    drows))  # fmt: skip
    sizes = seq.get("sizes") or {}
    if sizes:
        srows = [[size, f"{v['seq_new']:.1f}", f"{v['torch_copy']:.1f}", f"{v['ratio']:.3f}x", f"{v['seq_host']:.1f}",
                  f"{v['torch_replay']:.1f}"] if "ratio" in v else [size, v.get("error", "")]
                 for size, v in sizes.items()]  # fmt: skip
        parts.append(f"{head}Inputs from 16 KB to 256 MB\n\nWall time per step of a GPU-bound loop, 20 kernels and 2 "
                     "new input tensors a step; updated from the host: the same replay without device-side updates; "
                     "torch's replay alone: no new input (the floor).\n\n"
                     + table(["per input", "launchpad.record us", "torch graph + copy_ us", "record / torch",
                              "record, host updates us", "torch replay alone us"], srows))  # fmt: skip
    if seq.get("training"):
        from . import sequence_training

        parts += sequence_training.training_tables(seq["training"], head, table)
    if seq.get("models"):
        parts += model_tables(seq["models"], head, table)
    return parts
