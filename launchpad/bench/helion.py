"""Helion kernels called as Helion calls them, against the same kernels through
``launchpad.helion_kernel``, per call, side by side in one run; and where the rest of a call goes.

Two Helion kernels (:mod:`launchpad.bench._helion_kernels`, each with a fixed config): an add
on 4,096 floats and a matmul on 256 x 256 x 256 halves. Rows per kernel, each timed
like the launch overhead (:mod:`launchpad.bench.harness`: batches without a synchronization,
round-robin, medians), each checked against torch once before timing:

- ``helion_K``: ``K(x, y)``, Helion's own call: per-call binding (``Kernel.bind``), its host
  function, its launcher (``JITFunction.run``).
- ``lp_helion_K``: ``launchpad.helion_kernel(K)(x, y)``.
- breakdown: ``K_host_helion``, the compiled host function (``K.bind(args).compile_config(cfg)``)
  called directly, Helion's default launcher (so ``helion_K`` minus it is Helion's binding);
  ``K_host_lp``, the same host function with launchpad's launcher (``lp_helion_K`` minus it is
  launchpad's key and lookup); ``K_host_code``, the host function with a launcher that launches
  nothing (Helion's host code, its allocation included); ``K_alloc``, that allocation alone;
  ``K_launch``, launchpad's launch of the Triton kernel alone (the ``_launcher`` call).
- ``torch_K``: ``torch.add`` / ``torch.matmul``, an anchor.

Ratios are to Helion's own call in the same run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from .harness import Entry, Timed, WrongResult, add_ratios, measure, record_samples, set_up
from .report import ratio_text, us

__all__ = ["GROUPS", "helion_section", "helion_tables"]

GROUPS = {
    "add": "Helion add with broadcasting, 4,096 floats (config: block 1024, 4 warps)",
    "matmul": "Helion matmul (its example, identity epilogue), 256 x 256 x 256 fp16 (config: blocks 64 x 64 x 32, 4 warps, 3 stages)",
}


class _Kernel:
    """One benchmarked Helion kernel: its inputs, torch's answer and the pieces of a call."""

    def __init__(self, name: str):
        import torch

        import launchpad

        from . import _helion_kernels

        self.torch = torch
        self.kernel = getattr(_helion_kernels, name)
        self.args: tuple[Any, ...]
        self.reference: Callable[..., Any]
        gen = torch.Generator(device="cuda").manual_seed(0)
        if name == "add":
            self.args = (
                torch.randn(4096, device="cuda", generator=gen),
                torch.randn(4096, device="cuda", generator=gen),
            )
            self.reference = torch.add
        else:
            self.args = tuple(torch.randn(256, 256, device="cuda", generator=gen, dtype=torch.float16) for _ in "xy")
            self.reference = torch.matmul
        self.expected = self.reference(*self.args)
        self.ours = launchpad.helion_kernel(self.kernel)
        self.ours(*self.args)
        bound = self.kernel.bind(self.args)
        self.host = bound.compile_config(bound._config)  # Helion's own compiled host function
        self.recorded: list[tuple] = []

        def record(triton_kernel: Any, grid: Any, *args: Any, **options: Any) -> None:
            self.recorded.append((triton_kernel, grid, args, options))

        self.host(*self.args, _launcher=record)
        self.launch_call = self.recorded[0]

    def check(self, out: Any) -> None:
        self.torch.cuda.synchronize()
        if not self.torch.allclose(out.float(), self.expected.float(), rtol=1e-2, atol=1e-2):
            raise WrongResult("wrong result: differs from torch")


def _entries(name: str, state: dict[str, _Kernel]) -> list[Entry]:
    def kernel() -> _Kernel:
        if name not in state:
            state[name] = _Kernel(name)
        return state[name]

    def call(make: Callable[[_Kernel], Callable[[], Any]], note: str, *, check: bool = True) -> Callable[[Any], Timed]:
        def factory(_: Any) -> Timed:
            k = kernel()
            fn = make(k)
            out = fn()
            if check:
                k.check(out)
            return Timed(fn, note=note)

        return factory

    def launch_only(k: _Kernel) -> Callable[[], Any]:
        triton_kernel, grid, args, options = k.launch_call
        launcher = k.ours._launcher.launch
        return lambda: launcher(triton_kernel, grid, *args, **options)

    def alloc(k: _Kernel) -> Callable[[], Any]:
        torch, x, y = k.torch, *k.args
        if name == "add":
            return lambda: torch.empty(x.shape, dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
        return lambda: torch.empty([256, 256], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)

    nothing = lambda *args, **kwargs: None
    return [
        Entry(f"helion_{name}", f"{name}(x, y): Helion's own call", "peer",
              call(lambda k: lambda: k.kernel(*k.args), "Kernel.__call__: bind, host function, Triton's launcher")),
        Entry(f"lp_helion_{name}", f"launchpad.helion_kernel({name})(x, y)", "launchpad",
              call(lambda k: lambda: k.ours(*k.args), "launchpad's key and table, host function, launchpad's launcher")),
        Entry(f"{name}_host_helion", "host function, Helion's launcher", "breakdown",
              call(lambda k: lambda: k.host(*k.args), "bound.compile_config(config)(x, y)")),
        Entry(f"{name}_host_lp", "host function, launchpad's launcher", "breakdown",
              call(lambda k: lambda: k.host(*k.args, _launcher=k.ours._launcher.launch), "no key, no lookup")),
        Entry(f"{name}_host_code", "host code alone (no launch)", "breakdown",
              call(lambda k: lambda: k.host(*k.args, _launcher=nothing), "_launcher does nothing", check=False)),
        Entry(f"{name}_alloc", "its output allocation alone", "breakdown",
              call(alloc, "torch.empty as the host code calls it", check=False)),
        Entry(f"{name}_launch", "launchpad's launch alone", "breakdown",
              call(launch_only, "the _launcher call the host code makes", check=False)),
        Entry(f"torch_{name}", f"torch.{name}(x, y)", "anchor",
              call(lambda k: lambda: k.reference(*k.args), "torch's own kernel, an anchor")),
    ]  # fmt: skip


def helion_section(cfg: Any, log: Callable[[str], None]) -> dict[str, Any]:
    """Both kernels' rows (see the module documentation); ``{"missing": why}`` without Helion."""
    import torch

    if importlib.util.find_spec("helion") is None:
        return {"missing": "helion is not installed (pip install 'helion>=1.0,<1.5')"}
    sync = torch.cuda.synchronize
    state: dict[str, _Kernel] = {}
    groups = {}
    for name, description in GROUPS.items():
        log(f"Helion: {description}")
        launchers, results = set_up(_entries(name, state), None, sync=sync, log=log)
        samples, errors = measure(launchers, rounds=cfg.rounds, batch=cfg.batch, warmup=cfg.warmup, sync=sync)
        for lc in launchers:
            record_samples(results[lc.key], samples[lc.key], errors.get(lc.key))
        add_ratios(results, f"helion_{name}")
        groups[name] = {"kernel": description, "floor": f"helion_{name}", "results": results}
    return {"groups": groups}


def helion_tables(section: dict[str, Any], table: Callable[..., str], head: str) -> str:
    """The section as one table per kernel (or why it was not measured)."""
    if "missing" in section:
        return f"{head}Helion\n\nnot measured: {section['missing']}"
    parts = [f"{head}Helion kernels, per call\n\nRatios to Helion's own call in the same run."]
    for group in section.get("groups", {}).values():
        rows = []
        for rec in group["results"].values():
            if rec.get("status") != "ok" or "stats" not in rec:
                rows.append([rec["label"], f"{rec.get('status', 'missing')}: {rec.get('reason', '')}"])
                continue
            s = rec["stats"]
            rows.append([rec["label"], us(s["median"]), f"{us(s['p10'])}-{us(s['p90'])}",
                         ratio_text((rec.get("ratio") or {}).get("median"))])  # fmt: skip
        parts.append(group["kernel"] + "\n\n" + table(["call", "us/call", "p10-p90", "x Helion's call"], rows))
    return "\n\n".join(parts)
