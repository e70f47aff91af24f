"""A launcher's call timed as a caller's own loop runs it: the body of a ``lambda: k.launch(...)`` put
in the loop, not called through the lambda.

Each launcher of the benchmarks is given as a zero-argument lambda around one call (``lambda:
k.launch(1, 1024, x, y, n)``). Called through the lambda, every launch would also pay a Python
frame (60-100 ns on the H200 hosts, 2-3% of the floor), the harness's own cost: a user's loop pays
none for it, and neither do the C floor's loop and a bound launch (``bound()``, called as it is).
So :func:`loop_of` compiles ``for _ in repeat(None, count): <the lambda's body>`` once, from the
lambda's source, as a function that shares the lambda's globals and closure cells: the same names,
the same values, the same call, no frame. Where the source cannot be read back or holds more than
one lambda on its line, it returns None and the caller loops over the lambda itself.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
import types
from collections.abc import Callable
from typing import Any

__all__ = ["loop_of"]


def _body(fn: types.FunctionType) -> str | None:
    """The source of a zero-argument lambda's body, or None."""
    try:
        text = textwrap.dedent("".join(inspect.getsourcelines(fn)[0]))
    except (OSError, TypeError):
        return None
    tree = None
    for head, tail in (("", ""), ("(\n", "\n)"), ("{\n", "\n}")):  # a statement, or a line of a call or a dict
        try:
            tree = ast.parse(head + text.rstrip().rstrip(",") + tail)
            break
        except SyntaxError:
            continue
    if tree is None:
        return None
    found = [node for node in ast.walk(tree) if isinstance(node, ast.Lambda)]
    if len(found) != 1 or found[0].args.args or found[0].args.vararg or found[0].args.kwarg:
        return None
    return ast.unparse(found[0].body)


def loop_of(call: Callable[[], Any]) -> Callable[[int], None] | None:
    """``loop(count)``: ``count`` evaluations of ``call``'s body in one loop; None where ``call`` is not a
    lambda whose body can be read back (see the module's documentation)."""
    if not isinstance(call, types.FunctionType) or call.__name__ != "<lambda>" or call.__code__.co_argcount:
        return None
    body = _body(call)
    if body is None:
        return None
    free = call.__code__.co_freevars
    if {"_lp_count", "_lp_repeat", "_lp_i"} & {*free, *call.__code__.co_names}:
        return None  # the loop's own names: the body would read them instead of its own
    # the loop nested in a function of the lambda's free names, so that they are its free names too
    source = (f"def outer({', '.join(free)}):\n"
              f"    def loop(_lp_count, _lp_repeat):\n"
              f"        for _lp_i in _lp_repeat(None, _lp_count):\n"
              f"            {body}\n"
              f"    return loop\n")  # fmt: skip
    try:
        code = compile(source, f"<loop of {body}>", "exec")
    except SyntaxError:
        return None
    outer = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    loop = next(c for c in outer.co_consts if isinstance(c, types.CodeType))
    cells = dict(zip(free, call.__closure__ or ()))
    if any(name not in cells for name in loop.co_freevars):
        return None
    run = types.FunctionType(
        loop, call.__globals__, "loop", (itertools.repeat,), tuple(cells[name] for name in loop.co_freevars)
    )
    return run
