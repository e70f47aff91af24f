"""launchpad.bench.caller_loop: a benchmark's ``lambda: call(...)`` timed as its body in the loop,
with the lambda's names and values, and no Python frame per call."""

from __future__ import annotations

import sys

from launchpad.bench.caller_loop import loop_of
from launchpad.bench.harness import Timed

SCALE = 3  # a global of this module, which an inlined body reads where the lambda would


def frames_of(code, run) -> int:
    """How many Python frames of ``code`` were entered while ``run()`` ran."""
    frames = []
    sys.setprofile(lambda frame, event, arg: frames.append(1) if event == "call" and frame.f_code is code else None)
    try:
        run()
    finally:
        sys.setprofile(None)
    return len(frames)


def test_the_body_runs_count_times_with_the_lambdas_cells_and_globals():
    seen: list = []
    x = 1
    call = lambda: seen.append((x, SCALE))
    loop = loop_of(call)
    assert loop is not None
    loop(3)
    x = 2  # a cell the lambda shares: the loop reads it as the lambda would
    loop(1)
    assert seen == [(1, 3), (1, 3), (1, 3), (2, 3)]


def test_no_python_frame_per_call_where_the_body_is_inlined():
    seen: list = []
    call = lambda: seen.append(1)
    inlined, through = Timed(call), Timed(call, through_lambda=True)
    assert frames_of(call.__code__, lambda: inlined.run(50)) == 0
    assert frames_of(call.__code__, lambda: through.run(50)) == 50  # a frame per call
    assert len(seen) == 100


def test_what_is_not_inlined_is_called_as_given():
    def named():
        return None

    a, b = (lambda: 1), (lambda: 2)  # two lambdas on one line: which is which is unknown
    with_arg = lambda v: v
    assert loop_of(named) is None and loop_of(a) is None and loop_of(b) is None and loop_of(with_arg) is None
    assert loop_of(print) is None
    calls = []
    timed = Timed(lambda: calls.append(1), through_lambda=True)
    timed.run(4)
    assert calls == [1, 1, 1, 1]


def test_a_lambda_on_a_line_of_a_dict_or_a_call_is_inlined_and_its_names_are_its_own():
    seen: list = []
    count = 7  # a name the loop could have used for its own count: the body reads this one
    rows = {
        "row": Timed(lambda: seen.append(count)),
    }
    assert rows["row"].inlined
    rows["row"].run(2)
    assert seen == [7, 7]
