"""cuTile kernels of the benchmarks (imported only when cuTile is installed).

``vector_add`` is cuTile's quickstart kernel (``samples/quickstart/VectorAdd_quickstart.py`` of
cuTile-Python, Apache-2.0): ``c = a + b``, one tile of ``tile_size`` elements per tile block.
"""

from __future__ import annotations

import cuda.tile as ct


@ct.kernel
def vector_add(a, b, c, tile_size: ct.Constant[int]):
    pid = ct.bid(0)
    a_tile = ct.load(a, index=(pid,), shape=(tile_size,))
    b_tile = ct.load(b, index=(pid,), shape=(tile_size,))
    result = a_tile + b_tile
    ct.store(c, index=(pid,), tile=result)
