"""Recorded steps on several GPUs, the parts that need none (``launchpad.sequences.distributed``):
finding the DistributedDataParallel modules a step reaches, the warm-up it gets, the refusal that
gives the recipe, and the sequences closed before a process group is destroyed. A process group of
one (gloo, on the CPU) stands in; ``tests/test_sequence_distributed_gpu.py`` runs the steps on two GPUs.
"""

from __future__ import annotations

import functools
import inspect

import pytest
import torch

import launchpad as lp
from launchpad.sequences import distributed as D
from launchpad.sequences.capture import Node

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    if dist.is_initialized():
        yield None
        return
    store = tmp_path_factory.mktemp("gloo") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.fixture
def ddp(group):
    return DDP(torch.nn.Linear(4, 4))


GLOBAL_DDP = None


def through_global(x):
    return GLOBAL_DDP(x)


class Trainer:
    def __init__(self, model):
        self.model = model

    def step(self, x):
        return self.model(x)

    def __call__(self, x):
        return self.model(x)


def test_ddp_modules_found_where_a_step_reaches_them(ddp):
    global GLOBAL_DDP

    def closure(x):
        return ddp(x)

    def calls_closure(x):
        return closure(x)

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = ddp

    trainer = Trainer(ddp)
    assert D.ddp_modules(closure, {}) == [ddp]
    assert D.ddp_modules(calls_closure, {}) == [ddp]  # (a function it calls, through its closure)
    assert D.ddp_modules(trainer.step, {}) == [ddp]  # (a bound method's object)
    assert D.ddp_modules(trainer, {}) == [ddp]  # (a callable object)
    assert D.ddp_modules(functools.partial(lambda m, x: m(x), ddp), {}) == [ddp]
    assert D.ddp_modules(Wrapper(), {}) == [ddp]  # (a submodule)
    assert D.ddp_modules(ddp, {}) == [ddp]
    assert D.ddp_modules(lambda m, x: m(x), {"m": ddp}) == [ddp]  # (an argument)
    GLOBAL_DDP = ddp
    try:
        assert D.ddp_modules(through_global, {}) == [ddp]
    finally:
        GLOBAL_DDP = None
    assert D.ddp_modules(through_global, {}) == []
    assert D.ddp_modules(lambda x: x * 2, {"x": torch.ones(2)}) == []


def test_a_ddp_step_is_warmed_up_eleven_times(ddp):
    step = Trainer(ddp).step
    with D.prepared(step, {}, 0, True) as steps:
        assert steps.runs == D.DDP_WARMUP == 11
        assert steps.ddps == [ddp]
        runs = []
        steps.warm_up(lambda: runs.append(False), lambda: runs.append(True) or False)
    assert runs == [False] * 10 + [True]  # (only the last checks for host waits: DDP's first ones wait)
    with D.prepared(lambda x: x, {}, 0, True) as steps:
        assert steps.runs == 1 and steps.ddps == []
    with D.prepared(step, {}, 0, 12) as steps:
        assert steps.runs == 12


@pytest.mark.skipif(not hasattr(torch._C, "_set_override_stale_capture_stream"), reason="torch without it")
def test_stale_streams_are_redirected_while_recording_only(ddp):
    before = torch._C._override_stale_capture_stream()
    with D.prepared(Trainer(ddp).step, {}, 0, True):
        assert torch._C._override_stale_capture_stream()
    assert torch._C._override_stale_capture_stream() == before


@pytest.mark.parametrize("warmup", [False, 3])
def test_too_few_warm_ups_are_refused_before_running(ddp, warmup):
    ran = []

    def step(x):
        ran.append(x)
        return ddp(x)

    with pytest.raises(lp.RecordError, match=r"warmup=.*build it on a side stream"):
        with D.prepared(step, {}, 0, warmup):
            pass
    assert ran == []


def test_unused_parameter_search_is_refused_with_static_graph_as_the_way(group):
    searching = DDP(torch.nn.Linear(4, 4), find_unused_parameters=True)
    with pytest.raises(lp.RecordError, match=r"find_unused_parameters=True.*static_graph=True"):
        with D.prepared(Trainer(searching).step, {}, 0, True):
            pass
    with D.prepared(Trainer(DDP(torch.nn.Linear(4, 4), static_graph=True)).step, {}, 0, True) as steps:
        assert steps.runs == D.DDP_WARMUP


def test_a_ddp_module_not_found_is_named_when_the_capture_fails(ddp):
    class Hidden:  # (a class is not followed)
        model = ddp

    def step(x):
        return Hidden.model(x)

    assert D.ddp_modules(step, {}) == []
    with pytest.raises(lp.RecordError, match=r"did not find from it.*warmup=N"):
        with D.prepared(step, {}, 0, True) as steps:
            assert steps.runs == 1
            raise lp.RecordError("the function could not be captured: boom")


class FakeStream:
    def __init__(self, device=None):
        self.waits = 0

    def wait_stream(self, other):
        self.waits += 1


@pytest.fixture
def older_torch(monkeypatch):
    """A torch that cannot redirect a stale stream during a capture, on a CPU: streams stand in."""
    import contextlib

    monkeypatch.delattr(torch._C, "_set_override_stale_capture_stream", raising=False)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream())
    monkeypatch.setattr(D, "_STREAMS", {})


def accumulator_marked(model, mark="test"):
    return mark in torch.autograd.graph.get_gradient_edge(model.module.weight).node.metadata


def test_without_redirection_the_reducer_is_built_again_on_a_side_stream(ddp, older_torch):
    reference = torch.nn.Linear(4, 4)
    reference.load_state_dict(ddp.module.state_dict())
    x = torch.randn(2, 4)
    ddp(x).sum().backward()
    torch.autograd.graph.get_gradient_edge(ddp.module.weight).node.metadata["test"] = True
    assert accumulator_marked(ddp)  # (the reducer keeps its accumulators: the same node)
    with D.prepared(Trainer(ddp).step, {}, 0, True) as steps:
        assert isinstance(steps.stream, FakeStream) and ddp._launchpad_stream is steps.stream
        assert not accumulator_marked(ddp)  # new accumulators, made with the side stream current
        ran = []
        steps.warm_up(lambda: ran.append(False), lambda: ran.append(True) or False)
        assert len(ran) == D.DDP_WARMUP and steps.stream.waits == D.DDP_WARMUP
    ddp.module.weight.grad = None
    ddp(x).sum().backward()  # (the rebuilt reducer reduces: the gradient is the module's own)
    reference(x).sum().backward()
    assert torch.equal(ddp.module.weight.grad, reference.weight.grad)


def test_accumulators_an_old_graph_holds_are_refused_with_the_recipe(ddp, older_torch):
    kept = ddp(torch.randn(2, 4)).sum()  # (a loss kept from an eager step: its graph holds the accumulators)
    with pytest.raises(lp.RecordError, match=r"still held by an autograd graph.*side stream"):
        with D.prepared(Trainer(ddp).step, {}, 0, True):
            pass
    del kept


def test_a_failed_capture_of_a_ddp_step_gives_the_recipe(ddp):
    with pytest.raises(lp.RecordError, match=r"could not be captured: boom.*side stream"):
        with D.prepared(Trainer(ddp).step, {}, 0, True):
            raise lp.RecordError("the function could not be captured: boom")
    with pytest.raises(lp.RecordError, match=r"^an input reaches no launch$"):
        with D.prepared(Trainer(ddp).step, {}, 0, True):  # (not a failed capture: as it was)
            raise lp.RecordError("an input reaches no launch")


def test_a_negative_count_is_refused():
    with pytest.raises(lp.ArgumentError, match="warmup must be"):
        with D.prepared(lambda x: x, {}, 0, -1):
            pass


def test_record_takes_a_count_of_warm_ups():
    assert inspect.signature(lp.record).parameters["warmup"].default is True
    assert "int" in str(inspect.signature(lp.record).parameters["warmup"].annotation)


def nccl_node() -> Node:
    return Node(1, "kernel", name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")


class FakeSequence:
    def __init__(self, nodes):
        self.nodes = nodes
        self.closed = 0

    def close(self):
        self.closed += 1


def track(sequence: FakeSequence) -> FakeSequence:
    return D.track(sequence, sequence.nodes)


def test_sequences_holding_nccl_work_are_told_apart():
    assert D.holds_nccl([Node(0, "kernel", name="gemm"), nccl_node()])
    assert D.holds_nccl([Node(0, "graph", children=[nccl_node()])])
    assert not D.holds_nccl([Node(0, "kernel", name="gemm"), Node(2, "memcpy")])
    plain = track(FakeSequence([Node(0, "kernel", name="gemm")]))
    assert plain not in D._LIVE


def test_destroying_a_process_group_closes_them_first(group):
    held = track(FakeSequence([nccl_node()]))
    plain = track(FakeSequence([Node(0, "kernel", name="gemm")]))
    assert held in D._LIVE
    assert getattr(dist.destroy_process_group, "__launchpad_wrapped__", None) is not None
    from torch.distributed import distributed_c10d

    assert distributed_c10d.destroy_process_group is dist.destroy_process_group
    sub = dist.new_group([0])
    dist.destroy_process_group(sub)
    assert held.closed == 1 and plain.closed == 0
    assert held not in D._LIVE
    dist.barrier()  # (the default group is still there)
