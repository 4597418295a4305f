"""A symmetric matrix held as its upper tiles, each its own contiguous array.

Kernel ridge's normal matrix ``G = K_nm^T W K_nm`` (m x m) is summed chunk by
chunk, then factored and solved. Done on one ``m x m`` array, every BLAS call
on a tile that is not contiguous makes scipy's wrappers copy it in and out --
fresh allocations of up to half a gigabyte a call, whose page faults cost as
much as the products. Here
each upper tile ``(I, J)``, ``I <= J``, of :data:`TILE` rows and columns is an
array of its own in Fortran order, so every call works in place:

* :meth:`TiledUpper.add_gram` -- ``G += B^T B`` for a row block ``B`` (its column
  panels contiguous: Fortran order): ``syrk`` on diagonal tiles, ``gemm`` above,
  ``c m^2`` flops;
* :meth:`TiledUpper.cholesky` -- the tile algorithm (``potrf`` on the diagonal tile,
  ``trsm`` along its row, ``syrk``/``gemm`` on the trailing tiles): ``m^3 / 3`` flops;
* :meth:`TiledUpper.solve` -- the two triangular solves, tile row by tile row.

The tiles hold half the matrix (plus the diagonal tiles' lower halves): ``~4 m^2``
bytes in float64. No tile is larger than OpenBLAS's threaded ``syrk`` takes
without crashing (:data:`npt_dask.linalg.symmetric.SYRK_TILE`).

Layer rule: numpy arrays in, numpy arrays out (scipy's BLAS and LAPACK wrappers).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from npt_dask.arrays.buffers import populated_empty
from npt_dask.linalg.symmetric import routine, same_buffer

__all__ = ["TILE", "TiledUpper", "tiled_bytes"]

TILE = 2048
"""Rows and columns of a tile (32 MiB in float64): big enough for BLAS's full rate,
small enough that the tiles' count and the diagonal tiles' lower halves cost little."""


def _spans(m: int, tile: int) -> list[slice]:
    return [slice(s, min(m, s + tile)) for s in range(0, m, tile)]


def tiled_bytes(m: int, itemsize: int = 8, tile: int = TILE) -> int:
    """Bytes the upper tiles of an ``m x m`` matrix take."""
    sizes = [s.stop - s.start for s in _spans(m, tile)]
    return itemsize * sum(a * b for i, a in enumerate(sizes) for b in sizes[i:])


class TiledUpper:
    """The upper tiles of a symmetric ``m x m`` matrix (see the module doc)."""

    def __init__(self, m: int, dtype: Any = np.float64, tile: int = TILE) -> None:
        self.m, self.tile, self.dtype = int(m), int(tile), np.dtype(dtype)
        self.spans = _spans(self.m, self.tile)
        self.tiles = {
            (i, j): np.zeros((a.stop - a.start, b.stop - b.start), self.dtype, order="F")
            for i, a in enumerate(self.spans)
            for j, b in enumerate(self.spans)
            if i <= j
        }

    def pairs(self) -> Iterator[tuple[int, int]]:
        return iter(self.tiles)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tiles.values())

    def _call(self, name: str, tile: np.ndarray, *args: Any, **kwargs: Any) -> None:
        """A BLAS routine writing ``tile`` in place (its ``c``/``b`` argument)."""
        out = routine(self.dtype, name)(*args, **kwargs)
        if not same_buffer(out, tile):  # pragma: no cover - contiguous tiles are in place
            tile[...] = out

    def add_gram(self, b: np.ndarray, alpha: float = 1.0) -> TiledUpper:
        """``G += alpha B^T B`` for ``B`` of shape ``(c, m)`` (Fortran order, this dtype)."""
        for (i, j), t in self.tiles.items():
            left, right = b[:, self.spans[i]], b[:, self.spans[j]]
            if i == j:
                self._call("syrk", t, alpha, right, trans=1, beta=1.0, c=t, lower=0,
                           overwrite_c=1)  # fmt: skip
            else:
                self._call("gemm", t, alpha, left, right, trans_a=1, beta=1.0, c=t,
                           overwrite_c=1)  # fmt: skip
        return self

    def add_full(self, a: Any, alpha: float = 1.0) -> TiledUpper:
        """``G += alpha A`` for a symmetric ``A`` given as an ``m x m`` array (any dtype;
        the product in this dtype, through one tile-sized buffer)."""
        buffer = np.empty(self.tiles[(0, 0)].shape, dtype=self.dtype, order="F")
        scale = self.dtype.type(alpha)
        for (i, j), t in self.tiles.items():
            out = buffer[: t.shape[0], : t.shape[1]]
            np.multiply(a[self.spans[i], self.spans[j]], scale, out=out)
            t += out
        return self

    def plus_full(self, a: Any, alpha: float = 1.0) -> TiledUpper:
        """A new matrix ``G + alpha A`` (``A`` symmetric, ``m x m``, any dtype; the sum in
        this dtype): one pass writing each tile once into prefaulted memory (not
        :meth:`copy` then :meth:`add_full`, which write each twice into fresh pages)."""
        out = TiledUpper.__new__(TiledUpper)
        out.m, out.tile, out.dtype, out.spans = self.m, self.tile, self.dtype, self.spans
        out.tiles = {}
        scale = self.dtype.type(alpha)
        for (i, j), t in self.tiles.items():
            new = populated_empty(t.shape[::-1], self.dtype).T  # Fortran order
            np.multiply(a[self.spans[i], self.spans[j]], scale, out=new)
            new += t
            out.tiles[(i, j)] = new
        return out

    def add_diagonal(self, values: Any) -> TiledUpper:
        """``G += diag(values)`` (a number or m numbers)."""
        full = np.broadcast_to(np.asarray(values, dtype=self.dtype), (self.m,))
        for i, span in enumerate(self.spans):
            t = self.tiles[(i, i)]
            t[np.diag_indices(len(t))] += full[span]
        return self

    def __iadd__(self, other: TiledUpper) -> TiledUpper:
        for key, t in self.tiles.items():
            t += other.tiles[key]
        return self

    def copy(self) -> TiledUpper:
        out = TiledUpper.__new__(TiledUpper)
        out.m, out.tile, out.dtype, out.spans = self.m, self.tile, self.dtype, self.spans
        out.tiles = {k: t.copy(order="F") for k, t in self.tiles.items()}
        return out

    def diagonal(self) -> np.ndarray:
        return np.concatenate([np.diag(self.tiles[(i, i)]) for i in range(len(self.spans))])

    def to_full(self) -> np.ndarray:
        """The whole symmetric matrix (Fortran order): ``8 m^2`` bytes more."""
        out = np.empty((self.m, self.m), dtype=self.dtype, order="F")
        for (i, j), t in self.tiles.items():
            a, b = self.spans[i], self.spans[j]
            out[a, b] = np.triu(t) if i == j else t
            if i == j:
                out[a, b] += np.triu(t, 1).T
            else:
                out[b, a] = t.T
        return out

    def cholesky(self) -> bool:
        """``G = U^T U`` in place (upper tiles become U's); False when ``G`` is not
        positive definite to rounding (the tiles are then partly overwritten)."""
        count = len(self.spans)
        for k in range(count):
            diag = self.tiles[(k, k)]
            factor, info = routine(self.dtype, "potrf")(diag, lower=0, clean=1, overwrite_a=1)
            if info != 0:
                return False
            if not same_buffer(factor, diag):  # pragma: no cover - contiguous: in place
                diag[...] = factor
            for j in range(k + 1, count):  # U_kj = U_kk^-T A_kj
                t = self.tiles[(k, j)]
                self._call("trsm", t, 1.0, diag, t, lower=0, trans_a=1, overwrite_b=1)
            for i in range(k + 1, count):  # A_ij -= U_ki^T U_kj, i <= j
                u_ki = self.tiles[(k, i)]
                for j in range(i, count):
                    t = self.tiles[(i, j)]
                    if i == j:
                        self._call("syrk", t, -1.0, u_ki, trans=1, beta=1.0, c=t, lower=0,
                                   overwrite_c=1)  # fmt: skip
                    else:
                        self._call("gemm", t, -1.0, u_ki, self.tiles[(k, j)], trans_a=1,
                                   beta=1.0, c=t, overwrite_c=1)  # fmt: skip
        return True

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """``x`` with ``U^T U x = rhs`` after :meth:`cholesky` (``rhs`` is ``m x k``)."""
        x = np.array(rhs, dtype=self.dtype, order="F", copy=True)
        trsm, gemm = routine(self.dtype, "trsm"), routine(self.dtype, "gemm")
        count = len(self.spans)
        for i in range(count):  # U^T y = rhs, top down
            row = x[self.spans[i]]
            for k in range(i):
                row -= gemm(1.0, self.tiles[(k, i)], x[self.spans[k]], trans_a=1)
            x[self.spans[i]] = trsm(1.0, self.tiles[(i, i)], row, lower=0, trans_a=1)
        for i in reversed(range(count)):  # U x = y, bottom up
            row = x[self.spans[i]]
            for j in range(i + 1, count):
                row -= gemm(1.0, self.tiles[(i, j)], x[self.spans[j]])
            x[self.spans[i]] = trsm(1.0, self.tiles[(i, i)], row, lower=0, trans_a=0)
        return x
