"""``@triton.autotune`` and ``@triton.heuristics`` kernels through ``triton_launcher``, on CPU.

The kernels compile for sm_90 and launch on ``fake_gpu``; the autotuner's ``do_bench`` is a stand-in
that runs the timed call once and reports a time chosen per config, so which config wins (and what
ran while tuning) is known in advance. Triton's own semantics are the reference: configs keyed by
the ``key`` arguments and the tensors' dtypes, ``prune_configs_by``, ``reset_to_zero`` /
``restore_value``, pre and post hooks, the choice cached per key.
"""

from __future__ import annotations

import pytest
import torch

import launchpad
from launchpad.frontends.triton import launcher as lpt

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
import tutorial_matmul  # noqa: E402
from test_triton_launcher import SM90, aligned  # noqa: E402

BENCH: dict = {}  # what the stand-in do_bench does: set per test


def stand_in_bench(kernel_call, quantiles):
    """Run the timed call once, then report the time the test chose for the config that ran."""
    kernel_call()
    BENCH.setdefault("calls", []).append(BENCH["ran"]())
    timing = BENCH["times"][BENCH["ran"]()]
    if isinstance(timing, Exception):
        raise timing
    return [timing, timing * 0.9, timing * 1.1]


CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((256, 2), (512, 4), (1024, 8))]
HOOKS: list = []


@triton.autotune(configs=CONFIGS, key=["n"], reset_to_zero=["out_ptr"], restore_value=["x_ptr"],
                 do_bench=stand_in_bench)  # fmt: skip
@triton.jit
def tuned_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _early_prune(configs, nargs, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK"] <= nargs["n"] // 8]


@triton.autotune(configs=CONFIGS, key=["n"], prune_configs_by={"early_config_prune": _early_prune},
                 pre_hook=lambda args, reset_only=False: HOOKS.append(("pre", args["BLOCK"], reset_only)),
                 post_hook=lambda args, exception: HOOKS.append(("post", args["BLOCK"], exception)),
                 do_bench=stand_in_bench)  # fmt: skip
@triton.jit
def pruned_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.autotune(configs=CONFIGS, key=["n"],
                 prune_configs_by={"perf_model": lambda **kw: -kw["BLOCK"], "top_k": 1}, do_bench=stand_in_bench)  # fmt: skip
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def heuristic_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))
    else:
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.heuristics({"BLOCK": lambda args: 128 if args["n"] < 4096 else 1024})
@triton.autotune(configs=[triton.Config({}, num_warps=2), triton.Config({}, num_warps=4)], key=["n"],
                 do_bench=stand_in_bench)  # fmt: skip
@triton.jit
def outer_heuristic_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


class Ran:
    """Which compiled kernel each fake launch ran: its constants and block size."""

    def __init__(self, fake_gpu, monkeypatch):
        self.fake = fake_gpu
        self.kernels: dict[int, launchpad.Kernel] = {}
        real = lpt.Kernel

        def build(spec):
            kernel = fake_gpu.install(real(spec))
            self.kernels[kernel._loader.entries[-1][0]] = kernel
            return kernel

        monkeypatch.setattr(lpt, "Kernel", build)

    def const(self, name: str):
        kernel = self.kernels[self.fake.last.function]
        return next(a.value for a in kernel.args if a.kind == "const" and a.name == name)

    def config(self) -> tuple:
        """(BLOCK, threads per block) of the last launch."""
        return self.const("BLOCK"), self.fake.last.block[0]


@pytest.fixture
def ran(fake_gpu, monkeypatch):
    BENCH.clear()
    HOOKS.clear()
    r = Ran(fake_gpu, monkeypatch)
    BENCH["ran"] = r.config
    return r


def grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


def test_the_fastest_config_is_chosen_per_key_and_cached(ran):
    BENCH["times"] = {(256, 64): 3.0, (512, 128): 1.0, (1024, 256): 2.0}
    launcher = lpt.triton_launcher(tuned_add, target=SM90)
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    launcher[grid](x, y, out, 4096)
    assert BENCH["calls"] == [(256, 64), (512, 128), (1024, 256)]  # every config timed, through launchpad
    assert ran.config() == (512, 128) and ran.fake.last.grid == (8, 1, 1)  # then the best one launched
    assert launcher.best_config.kwargs == {"BLOCK": 512} and launcher.best_config.num_warps == 4
    assert list(launcher.cache) == [(4096, "torch.float32", "torch.float32", "torch.float32")]
    run = launcher._launcher(launcher.best_config).run  # after tuning: the fast path
    assert type(run).__name__ == ("Dispatcher" if launchpad.launch_path()[0] == "compiled" else "method")
    launcher[grid](x, y, out, 4096)
    assert len(BENCH["calls"]) == 3 and ran.config() == (512, 128)  # cached: no timing
    BENCH["times"] = {(256, 64): 0.5, (512, 128): 1.0, (1024, 256): 2.0}
    launcher[grid](x, y, out, 8192)  # a new key value: tuned again
    assert len(BENCH["calls"]) == 6 and ran.config() == (256, 64) and ran.fake.last.grid == (32, 1, 1)
    launcher[grid](x.half(), y.half(), out.half(), 4096)  # tensor dtypes are part of the key
    assert len(BENCH["calls"]) == 9 and len(launcher.cache) == 3
    launcher[grid](x, y, out, 4096)
    assert ran.config() == (512, 128) and len(BENCH["calls"]) == 9


def test_reset_to_zero_and_restore_value_around_every_timed_launch(ran):
    BENCH["times"] = {(256, 64): 3.0, (512, 128): 1.0, (1024, 256): 2.0}
    launcher = lpt.triton_launcher(tuned_add, target=SM90)
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    out.fill_(7.0)
    original = x.clone()
    seen = []

    def kernel_writes(launch):  # each launch "writes" x (as a kernel updating it in place would) and sees out
        seen.append(out.abs().sum().item())
        x.add_(1.0)

    ran.fake.emulate = kernel_writes
    launcher[grid](x, y, out, 4096)
    assert seen[:3] == [0.0, 0.0, 0.0]  # out zeroed before each timed launch
    assert torch.equal(x, original + 1.0)  # restored after each timed launch; the real one counts once


def test_prune_and_hooks(ran):
    BENCH["times"] = {(256, 64): 2.0, (512, 128): 1.0, (1024, 256): 0.1}
    launcher = lpt.triton_launcher(pruned_add, target=SM90)
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    launcher[grid](x, y, out, 4096)  # early_config_prune keeps BLOCK <= 512
    assert BENCH["calls"] == [(256, 64), (512, 128)] and ran.config() == (512, 128)
    assert HOOKS == [("pre", 256, False), ("post", 256, None), ("pre", 512, False), ("post", 512, None),
                     ("pre", 512, True)]  # fmt: skip
    HOOKS.clear()
    launcher[grid](x, y, out, 2048)  # only BLOCK 256 left: no timing, as Triton
    assert len(BENCH["calls"]) == 2 and ran.config() == (256, 64) and HOOKS == []


def test_heuristics_inside_and_outside_autotune(ran):
    launcher = lpt.triton_launcher(heuristic_add, target=SM90)
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    launcher[grid](x, y, out, 4096)  # perf_model + top_k=1: BLOCK 1024 without timing
    assert "calls" not in BENCH and ran.config() == (1024, 256) and ran.const("EVEN") is True
    launcher[grid](x, y, out, 4000)
    assert ran.config() == (1024, 256) and ran.const("EVEN") is False
    BENCH["times"] = {(128, 64): 2.0, (128, 128): 1.0, (1024, 64): 1.0, (1024, 128): 2.0}
    outer = lpt.triton_launcher(outer_heuristic_add, target=SM90)
    outer[grid](x, y, out, 1000)
    assert ran.config() == (128, 128) and ran.fake.last.grid == (8, 1, 1)
    outer[grid](x, y, out, 4096)
    assert ran.config() == (1024, 64)


def test_configs_the_device_cannot_run_are_skipped(ran):
    BENCH["times"] = {(256, 64): 3.0, (512, 128): launchpad.OutOfResources("too much shared memory"),
                      (1024, 256): 2.0}  # fmt: skip
    launcher = lpt.triton_launcher(tuned_add, target=SM90)
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    launcher[grid](x, y, out, 4096)
    assert ran.config() == (1024, 256)
    assert launcher.configs_timings[CONFIGS[1]] == [float("inf")] * 3


def test_autotuned_symbols_cannot_be_given(ran):
    BENCH["times"] = {(256, 64): 3.0, (512, 128): 1.0, (1024, 256): 2.0}
    launcher = lpt.triton_launcher(tuned_add, target=SM90)
    x = aligned(4096)
    with pytest.raises(ValueError, match="Conflicting meta-parameters: BLOCK"):
        launcher[grid](x, x, x, 4096, BLOCK=128)


def test_warmup_and_rep_reach_tritons_benchmark(ran, monkeypatch):
    import triton.testing

    got = []

    def do_bench(fn, warmup=25, rep=100, quantiles=None, **_):
        fn()
        got.append((warmup, rep))
        return [1.0, 0.9, 1.1]

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    with pytest.warns(DeprecationWarning, match="warmup, rep"):
        tuned = triton.autotune(configs=CONFIGS[:2], key=["n"], warmup=5, rep=20)(tuned_add.fn)
    launcher = lpt.triton_launcher(tuned, target=SM90)
    x = aligned(4096)
    launcher[grid](x, x, x, 4096)
    assert got == [(5, 20), (5, 20)]


def test_tutorial_matmul_tunes_and_launches(ran):
    """Triton's matmul tutorial as written: 8 configs keyed by M, N, K, a grid from the chosen config."""
    timings = iter([5.0, 4.0, 1.0, 3.0, 6.0, 7.0, 8.0, 9.0])

    def ran_config():
        return ran.const("BLOCK_SIZE_M"), ran.const("BLOCK_SIZE_N"), ran.const("BLOCK_SIZE_K")

    order = []

    def bench(kernel_call, quantiles):
        kernel_call()
        order.append(ran_config())
        t = next(timings)
        return [t, t, t]

    tuner = tutorial_matmul.matmul_kernel
    monkey = pytest.MonkeyPatch()
    monkey.setattr(tuner, "_do_bench", bench, raising=False)
    monkey.setitem(tuner.__dict__, "do_bench", bench)
    try:
        launcher = lpt.triton_launcher(tuner, target=SM90)
        a, b = aligned(512 * 256, torch.float16).view(512, 256), aligned(256 * 384, torch.float16).view(256, 384)
        c = tutorial_matmul.matmul(launcher, a, b, activation="leaky_relu")
    finally:
        monkey.undo()
    assert len(order) == 8 and ran_config() == (128, 128, 32)  # the third config timed fastest
    assert ran.fake.last.grid == (4 * 3, 1, 1) and ran.fake.last.block == (128, 1, 1)
    assert ran.const("ACTIVATION") == "leaky_relu" and c.shape == (512, 384)
    p = ran.fake.last.params
    assert p[3:6] == [(512).to_bytes(4, "little"), (384).to_bytes(4, "little"), (256).to_bytes(4, "little")]


@pytest.fixture
def triton_disk(monkeypatch, tmp_path):
    """Triton's cache in a folder of this test's, and the target Triton's disk cache keys on
    (``driver.active`` needs a GPU)."""
    import types

    import triton.runtime.autotuner as autotuner

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setattr(autotuner, "driver", types.SimpleNamespace(active=types.SimpleNamespace(
        get_current_target=lambda: SM90)))  # fmt: skip
    return tmp_path / "triton"


def test_cache_results_lets_another_autotuner_reuse_the_timings(ran, triton_disk):
    """``cache_results=True``: the timings go to Triton's cache as Triton writes them; an autotuner
    made later (as in another process) finds them there and times nothing."""
    BENCH["times"] = {(256, 64): 3.0, (512, 128): 1.0, (1024, 256): 2.0}
    first = triton.autotune(configs=CONFIGS, key=["n"], do_bench=stand_in_bench, cache_results=True)(tuned_add.fn)
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    lpt.triton_launcher(first, target=SM90)[grid](x, y, out, 4096)
    assert len(BENCH["calls"]) == 3 and ran.config() == (512, 128)
    (saved,) = list(triton_disk.rglob("tuned_add.autotune.json"))
    import json

    content = json.loads(saved.read_text())
    assert content["key"] == [4096, "torch.float32", "torch.float32", "torch.float32"]
    assert [c["kwargs"] for c, _ in content["configs_timings"]] == [{"BLOCK": b} for b in (256, 512, 1024)]

    second = triton.autotune(configs=CONFIGS, key=["n"], do_bench=stand_in_bench, cache_results=True)(tuned_add.fn)
    launcher = lpt.triton_launcher(second, target=SM90)
    launcher[grid](x, y, out, 4096)
    assert len(BENCH["calls"]) == 3  # no config timed again
    assert ran.config() == (512, 128) and launcher.best_config.kwargs == {"BLOCK": 512}
    assert launcher.configs_timings[launcher.best_config][0] == 1.0
    launcher[grid](x, y, out, 8192)  # a key the disk does not have: timed
    assert len(BENCH["calls"]) == 6


def test_without_cache_results_nothing_reaches_the_disk(ran, triton_disk, monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
    BENCH["times"] = {(256, 64): 3.0, (512, 128): 1.0, (1024, 256): 2.0}
    tuned = triton.autotune(configs=CONFIGS, key=["n"], do_bench=stand_in_bench)(tuned_add.fn)
    x = aligned(4096)
    lpt.triton_launcher(tuned, target=SM90)[grid](x, x, x, 4096)
    assert len(BENCH["calls"]) == 3 and not list(triton_disk.rglob("*.autotune.json"))


def test_the_print_and_listener_knobs_as_triton_calls_them(ran, monkeypatch, capsys):
    from triton import knobs

    BENCH["times"] = {(256, 64): 3.0, (512, 128): 1.0, (1024, 256): 2.0}
    heard = []
    monkeypatch.setattr(knobs.autotuning, "print", True)
    if hasattr(knobs.autotuning, "listener"):  # Triton 3.9
        monkeypatch.setattr(knobs.autotuning, "listener", lambda **kw: heard.append(kw))
    tuned = triton.autotune(configs=CONFIGS, key=["n"], do_bench=stand_in_bench)(tuned_add.fn)
    x = aligned(4096)
    launcher = lpt.triton_launcher(tuned, target=SM90)
    launcher[grid](x, x, x, 4096)
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("Autotuning kernel")] == [
        f"Autotuning kernel tuned_add with config {c}" for c in CONFIGS
    ]
    assert "Triton autotuning for function tuned_add,\nwith key as (4096, 'torch.float32', 'torch.float32', " in out
    assert f"best config selected: {CONFIGS[1]};" in out
    if hasattr(knobs.autotuning, "listener"):
        (call,) = heard
        assert call["fn"] is tuned_add.fn and call["key"] == (4096, "torch.float32", "torch.float32", "torch.float32")
        assert call["best_config"] is CONFIGS[1] and call["cache_hit"] is False and call["duration"] >= 0
        assert set(call["configs_timings"]) == set(CONFIGS)
    launcher[grid](x, x, x, 4096)  # tuned already: nothing printed or heard
    assert capsys.readouterr().out == "" and len(heard) <= 1
