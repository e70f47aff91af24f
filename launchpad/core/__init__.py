"""The core: what a kernel is, and the one way to the driver.

The spec (:mod:`.spec`: ``KernelSpec``, ``Arg``, ``LaunchPlan``) and its parameter types
(:mod:`.params`), binaries read without a GPU (:mod:`.binary`), the compile target
(:mod:`.arch`), a callback once a module is imported (:mod:`.after_import`), saved artifacts (:mod:`.artifact`), the disk cache (:mod:`.cache`), release
numbers as the front ends compare them (:mod:`.versions`), the per-device loader
(:mod:`.loader`) and the only code that calls ``cuda.bindings`` (the :mod:`.driver` package).

Imports: ``launchpad.errors`` and modules of this folder, nothing else of launchpad. The core
knows no executor and no front end.
"""
