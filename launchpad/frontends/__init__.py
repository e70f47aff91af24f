"""The ways in: one folder per front end, each turning its input into one ``KernelSpec``.

``cpp`` compiles CUDA C++ (NVRTC, nvJitLink), ``triton`` takes what Triton compiled (in process,
from its cache folder, through the drop-in launcher), ``numba`` compiles Numba kernels without
Numba's dispatcher. Each hands its finished spec to :class:`launchpad.Kernel`.

Imports: ``launchpad.core``, ``launchpad.launch``, ``launchpad.kernel`` and ``launchpad.errors``.
A front end never imports another front end.
"""
