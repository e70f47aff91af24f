"""CUDA C++: source compiled at run time, typed by the compiler.

:mod:`.frontend` holds ``compile_cuda`` and its relatives; :mod:`.demangle` reads the
parameter types and names the compiler gives each kernel.

Imports: as every front end (``launchpad.frontends``); no other front end.
"""
