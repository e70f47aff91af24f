"""The compiled launch executor, ``launchpad.launch._claunch``: plain C on the CPython API.

It needs a C compiler and Python's headers, nothing of CUDA, DLPack or torch (it declares the
few types it uses). It is optional: where it cannot be built, ``pip install`` still installs
launchpad, whose Python executor then launches everything (``python -m launchpad info`` says
which path is active). ``LAUNCHPAD_REQUIRE_CLAUNCH=1`` makes a failed build an error instead.
"""

import os

from setuptools import Extension, setup

SOURCES = ["module.c", "launcher_build.c", "launcher.c", "configured.c", "tensors.c", "values.c", "tile.c", "bound.c",
           "dispatch.c", "replay.c", "replay_build.c", "torch_fields.c"]

claunch = Extension(
    "launchpad.launch._claunch",
    sources=[f"launchpad/launch/_claunch/{name}" for name in SOURCES],
    depends=["launchpad/launch/_claunch/claunch.h", "launchpad/launch/_claunch/common_values.h",
             "launchpad/launch/_claunch/replay.h"],
    extra_compile_args=[
        "-O2",
        # only PyInit__claunch is exported (PyMODINIT_FUNC says so): calls between the module's own
        # files are direct, not through the PLT as an interposable symbol's would be
        "-fvisibility=hidden",
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        "-Wno-missing-field-initializers",
        *os.environ.get("LAUNCHPAD_CFLAGS", "").split(),
    ],
    extra_link_args=os.environ.get("LAUNCHPAD_LDFLAGS", "").split(),
    optional=os.environ.get("LAUNCHPAD_REQUIRE_CLAUNCH") != "1",
)

setup(ext_modules=[claunch])
