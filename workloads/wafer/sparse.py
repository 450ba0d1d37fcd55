"""Sparse matrices for ``spmv``: where they come from and how they are split over the PEs.

Sources (the ``matrix`` parameter): a Matrix Market file (``path/to/file.mtx``, read by
:func:`read_mtx`), or a generator: ``random`` (seeded, a given ``density``), ``banded``
(``bandwidth`` diagonals each side of the main one, seeded values), ``poisson2d`` (the 5-point
stencil of a square grid, n = side²), ``laplacian`` (the graph Laplacian of a seeded networkx
graph) or ``powerlaw`` (a seeded Chung-Lu matrix: power-law row and column counts, ``degree``
non-zeros per row on average). ``poisson2d``, ``banded``, ``random`` and ``powerlaw`` build CSR
directly, never a dense matrix, so they scale to the full array's million-row matrices. Every
source gives a SciPy CSR matrix in float32.

Partition: A (n_rows x n_cols) over px x py PEs. PE (x, y) holds the block of rows
``y·rb .. (y+1)·rb`` and columns ``x·cb .. (x+1)·cb`` (rb = ceil(n_rows / py), cb = ceil(n_cols /
px); the last blocks are padded with empty rows and columns). A block is stored as CSR (a row
pointer per row) or, when it is hypersparse (fewer non-zeros than rows), as DCSR: only its
non-empty rows, with their row indices. Both keep FP32 values and 16-bit column indices.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import warnings
from collections.abc import Iterator, Mapping

import numpy as np
import scipy.sparse as sp

from simcore.errors import ConfigError

GENERATORS = ("random", "banded", "poisson2d", "laplacian", "powerlaw")
GRAPHS = ("barabasi_albert", "erdos_renyi", "watts_strogatz", "grid")
LAYOUTS = ("auto", "csr", "dcsr")
#: The largest matrix a .mtx header may declare, checked before reading it (so that a corrupt
#: or hostile header cannot make the reader allocate gigabytes): a wafer's 850,000 PEs of
#: 48 kB hold about 10^10 words, but reading 2^26 entries already takes a gigabyte or two.
MAX_ORDER = 1 << 24
MAX_ENTRIES = 1 << 26
#: The longest entry line of a Matrix Market file read (three numbers in full precision with
#: spaces fit in 80 bytes), and the room for comments: a larger file is refused before it is
#: read, so a huge file cannot exhaust the memory (the reader holds the entries it reads).
MAX_ENTRY_BYTES = 128
MAX_COMMENT_BYTES = 1 << 20
#: What the ``matrix`` parameter may be, in its errors.
MATRIX_ALLOWED = f"a Matrix Market file (.mtx) or a generator: {', '.join(GENERATORS)}"
WORD_BYTES = 4
INDEX_BYTES = 2  # column indices, row pointers and row ids are 16-bit


@functools.lru_cache(maxsize=16)
def load(
    matrix: str,
    n: int,
    density: float,
    bandwidth: int,
    graph: str,
    degree: int,
    seed: int,
    exponent: float = 2.5,
) -> sp.csr_matrix:
    """The matrix named by ``matrix`` (a generator name or a .mtx path), CSR float32.

    Errors name the ``matrix`` key: a missing file, a file that is not Matrix Market, a
    generator's bad size. Results are cached (``check`` and ``build`` both load)."""
    if matrix in GENERATORS:
        if matrix == "powerlaw":
            a = powerlaw(n, degree, exponent, seed)
        else:
            a = _generate(matrix, n, density, bandwidth, graph, degree, seed)
    else:
        a = read_mtx(matrix)
    a = sp.csr_matrix(a, dtype=np.float32)
    a.sum_duplicates()
    a.eliminate_zeros()
    a.sort_indices()
    return a


#: Bytes a Matrix Market file may hold: printable ASCII, tabs and line ends.
_TEXT = re.compile(rb"[^\t\n\r\x20-\x7e]")


def _check_text(path: str, allowed: str) -> None:
    """Refuse a file that is not ASCII text before scipy's reader sees it: scipy 1.17's
    fast_matrix_market crashes the process (a segmentation fault, not an exception) on some
    binary bytes inside a number (found by the fuzz tier: ``3.\x1cD\x18\xfb\x80}``)."""
    try:
        with open(path, "rb") as fh:
            offset = 0
            while chunk := fh.read(1 << 20):
                bad = _TEXT.search(chunk)
                if bad:
                    raise ConfigError(
                        "matrix", path,
                        f"not a Matrix Market file: byte {chunk[bad.start()]:#04x} at offset "
                        f"{offset + bad.start():,} is not ASCII text", allowed=allowed,
                    )  # fmt: skip
                offset += len(chunk)
    except OSError as exc:
        raise ConfigError("matrix", path, f"cannot be read ({exc.strerror or exc})") from None


def read_mtx(path: str) -> sp.spmatrix:
    """A Matrix Market file (coordinate: real, integer or pattern; general, symmetric or
    skew-symmetric; array: real or integer, general) as a sparse matrix. Read here rather than
    by ``scipy.io.mmread``: scipy 1.17's reader ends the process (a segmentation fault or
    SIGFPE, not an exception) on some malformed files the fuzz tier found (``3 3 3.g/`` as an
    entry; a ``0 x N`` array). Every refusal names the ``matrix`` key and the line."""
    allowed = MATRIX_ALLOWED
    if not os.path.isfile(path):
        raise ConfigError("matrix", path, "no such file", allowed=allowed)
    _check_text(path, allowed)

    def bad(text: str) -> ConfigError:
        return ConfigError(
            "matrix", path, f"not a readable Matrix Market file ({text})", allowed=allowed
        )

    with open(path, encoding="ascii") as fh:
        banner = fh.readline().split()
        if len(banner) != 5 or [w.lower() for w in banner[:2]] != ["%%matrixmarket", "matrix"]:
            raise bad("line 1: not a '%%MatrixMarket matrix LAYOUT FIELD SYMMETRY' banner")
        layout, field, symmetry = (w.lower() for w in banner[2:])
        if field == "complex":
            raise ConfigError("matrix", path, "complex values; spmv is FP32 real")
        fields = ("real", "integer", "pattern") if layout == "coordinate" else ("real", "integer")
        symmetries = ("general", "symmetric", "skew-symmetric")
        if layout not in ("coordinate", "array") or field not in fields:
            raise bad(f"line 1: '{layout} {field}' is not a layout and field read here")
        if symmetry not in symmetries or (layout == "array" and symmetry != "general"):
            raise bad(f"line 1: '{layout} {symmetry}' is not read here; write it as general")
        line_no, size = 1, None
        for line in fh:
            line_no += 1
            text = line.strip()
            if text and not text.startswith("%"):
                size = text.split()
                break
        want = 3 if layout == "coordinate" else 2
        if size is None or len(size) != want or not all(re.fullmatch(r"\d+", w) for w in size):
            raise bad(f"line {line_no}: the size line must be {want} whole numbers")
        rows, cols = int(size[0]), int(size[1])
        stored = int(size[2]) if layout == "coordinate" else rows * cols
        if rows < 1 or cols < 1:
            raise ConfigError("matrix", path, f"the header declares a {rows} x {cols} matrix")
        if max(rows, cols) > MAX_ORDER or stored > MAX_ENTRIES:
            raise ConfigError(
                "matrix", path,
                f"the header declares a {rows:,} x {cols:,} matrix of {stored:,} stored entries",
                allowed=f"at most {MAX_ORDER:,} rows and columns and {MAX_ENTRIES:,} stored "
                "entries (more than a wafer's SRAM holds)",
            )  # fmt: skip
        limit = stored * MAX_ENTRY_BYTES + MAX_COMMENT_BYTES
        size_bytes = os.path.getsize(path)
        if size_bytes > limit:  # np.loadtxt would hold it all (a 4 GB blank line: 8 GB)
            raise ConfigError(
                "matrix", path,
                f"the file has {size_bytes:,} bytes but its {stored:,} declared entries need at "
                f"most {limit:,} ({MAX_ENTRY_BYTES} bytes an entry, {MAX_COMMENT_BYTES:,} of "
                "comments)",
                allowed="a file no larger than its entries need; check the size line",
            )  # fmt: skip
        columns = {"coordinate": 2 if field == "pattern" else 3, "array": 1}[layout]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "input contained no data": counted below
                body = np.loadtxt(fh, dtype=np.float64, comments="%", ndmin=2, max_rows=stored + 1)
        except ValueError as err:
            raise bad(f"after line {line_no}: {err}") from None
    if body.size == 0:
        body = body.reshape(0, columns)
    if body.shape[1] != columns:
        raise bad(f"entries have {body.shape[1]} numbers each; {layout} {field} has {columns}")
    if body.shape[0] != stored:
        more = "more" if body.shape[0] > stored else f"{body.shape[0]:,}"
        raise bad(f"the size line declares {stored:,} entries but the file has {more}")
    if layout == "array":
        a = sp.csr_matrix(body[:, 0].reshape(cols, rows).T)
    else:
        i, j = body[:, 0], body[:, 1]
        inside = (i >= 1) & (i <= rows) & (j >= 1) & (j <= cols) & (i % 1 == 0) & (j % 1 == 0)
        if not inside.all():
            k = int(np.flatnonzero(~inside)[0])
            raise bad(f"entry {k + 1}: ({i[k]:g}, {j[k]:g}) is not inside {rows} x {cols}")
        v = np.ones(len(i)) if field == "pattern" else body[:, 2]
        i, j = i.astype(np.int64) - 1, j.astype(np.int64) - 1
        if symmetry != "general":
            off = i != j
            sign = -1.0 if symmetry == "skew-symmetric" else 1.0
            i, j, v = (np.concatenate([i, j[off]]), np.concatenate([j, i[off]]),
                       np.concatenate([v, sign * v[off]]))  # fmt: skip
        a = sp.coo_matrix((v, (i, j)), shape=(rows, cols))
    if not sp.issparse(a):  # an 'array' (dense) Matrix Market file
        a = sp.csr_matrix(np.asarray(a))
    if a.shape[0] < 1 or a.shape[1] < 1:
        raise ConfigError("matrix", path, f"the matrix is {a.shape[0]} x {a.shape[1]}")
    if np.iscomplexobj(a.data):
        raise ConfigError("matrix", path, "complex values; spmv is FP32 real")
    values = a.data if sp.issparse(a) else np.asarray(a)
    with np.errstate(invalid="ignore", over="ignore"):
        bad = ~np.isfinite(values) | (np.abs(values) > np.finfo(np.float32).max)
    if bad.any():
        first = values[np.flatnonzero(bad)[0]] if values.ndim == 1 else values[bad][0]
        raise ConfigError(
            "matrix", path,
            f"{int(bad.sum()):,} value(s) not finite in FP32 (the first: {float(first)!r})",
            allowed=f"finite values of magnitude at most {np.finfo(np.float32).max:.4g}",
            hint="fix the file's values",
        )  # fmt: skip
    return a


def _generate(
    kind: str, n: int, density: float, bandwidth: int, graph: str, degree: int, seed: int
) -> sp.spmatrix:
    rng = np.random.default_rng([seed, 11])
    if kind == "random":
        if not 0.0 < density <= 1.0:
            raise ConfigError("density", density, "must be in (0, 1]", allowed="(0, 1]")
        return sp.random(n, n, density=density, format="csr", rng=rng, dtype=np.float64)
    if kind == "banded":
        if not 0 <= bandwidth < n:
            raise ConfigError(
                "bandwidth", bandwidth, f"must be below n = {n}", allowed=f"0 .. {n - 1}"
            )
        offsets = list(range(-bandwidth, bandwidth + 1))
        diags = [rng.standard_normal(n - abs(k)) for k in offsets]
        return sp.diags(diags, offsets, shape=(n, n), format="csr")
    if kind == "poisson2d":
        side = math.isqrt(n)
        if side * side != n:
            raise ConfigError(
                "n", n, "matrix = 'poisson2d' needs a square grid: n must be a perfect square",
                allowed=f"e.g. {side * side} or {(side + 1) ** 2}",
            )  # fmt: skip
        return poisson2d(side)
    return laplacian(n, graph, degree, density, seed)


def poisson2d(side: int) -> sp.csr_matrix:
    """The 5-point Laplacian of a side x side grid (Dirichlet): 4 on the diagonal, -1 to each
    grid neighbour; order side². Built as CSR from its five diagonals (no dense matrix, no
    Kronecker products: a million-row stencil takes a fraction of a second)."""
    n = side * side
    if side == 1:  # (one grid point: no neighbours, and the diagonals' offsets would clash)
        return sp.csr_matrix(np.full((1, 1), 4.0))
    horiz = -np.ones(n - 1)
    horiz[side - 1 :: side] = 0.0  # no neighbour across the end of a grid row
    vert = -np.ones(max(n - side, 0))
    a = sp.diags([vert, horiz, 4 * np.ones(n), horiz, vert], [-side, -1, 0, 1, side], format="csr")
    a.eliminate_zeros()
    return a


def powerlaw(n: int, degree: int, exponent: float, seed: int) -> sp.csr_matrix:
    """A seeded n x n matrix whose rows' and columns' non-zero counts follow a power law (a
    Chung-Lu random graph, as in web and social graphs): about ``n · degree`` entries, each
    joining row i and column j drawn with probability proportional to the weight w = (k+1)^(-1 /
    (exponent - 1)) of their rank k, ranks shuffled so the heavy rows are spread over the
    array; standard normal values (entries drawn twice are summed). Built as CSR from the drawn
    coordinates: no dense matrix."""
    if degree < 1:
        raise ConfigError("degree", degree, "must be at least 1 (mean non-zeros per row)")
    if not exponent > 2.0:
        raise ConfigError(
            "exponent", exponent, "must be above 2 (a power law with a finite mean)",
            allowed="> 2, e.g. 2.5",
        )  # fmt: skip
    rng = np.random.default_rng([seed, 13])
    w = np.arange(1, n + 1, dtype=np.float64) ** (-1.0 / (exponent - 1.0))
    cdf = np.cumsum(w[rng.permutation(n)])
    cdf /= cdf[-1]
    m = n * degree
    rows = np.minimum(np.searchsorted(cdf, rng.random(m), side="right"), n - 1)
    cols = np.minimum(np.searchsorted(cdf, rng.random(m), side="right"), n - 1)
    vals = rng.standard_normal(m)
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n))


def laplacian(n: int, graph: str, degree: int, density: float, seed: int) -> sp.csr_matrix:
    """L = D - A of a seeded networkx graph with n nodes."""
    import networkx as nx  # this generator only

    if graph == "barabasi_albert":
        if not 1 <= degree < n:
            raise ConfigError("degree", degree, f"must be in 1 .. {n - 1} for n = {n}")
        g = nx.barabasi_albert_graph(n, degree, seed=seed)
    elif graph == "erdos_renyi":
        g = nx.gnp_random_graph(n, density, seed=seed)
    elif graph == "watts_strogatz":
        if not 2 <= degree < n:
            raise ConfigError("degree", degree, f"must be in 2 .. {n - 1} for n = {n}")
        g = nx.watts_strogatz_graph(n, degree, 0.1, seed=seed)
    else:
        side = math.isqrt(n)
        if side * side != n:
            raise ConfigError(
                "n", n, "matrix = laplacian with graph = grid needs n to be a perfect square"
            )
        g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(side, side))
    return sp.csr_matrix(nx.laplacian_matrix(g, nodelist=range(n)), dtype=np.float64)


@dataclasses.dataclass(frozen=True)
class Block:
    """One PE's block: local CSR (``rowptr`` over ``rows`` = the stored rows, all of them in CSR,
    the non-empty ones in DCSR with their ids in ``row_ids``), FP32 values, 16-bit columns."""

    fmt: str  # "csr" or "dcsr"
    n_rows: int  # rows of the block (padding included)
    n_cols: int
    rowptr: np.ndarray  # uint16, len(stored rows) + 1
    row_ids: np.ndarray  # uint16, the stored rows' local ids (DCSR); arange in CSR
    cols: np.ndarray  # uint16, per non-zero
    vals: np.ndarray  # float32, per non-zero

    @property
    def nnz(self) -> int:
        return len(self.vals)

    @property
    def stored_rows(self) -> int:
        return len(self.rowptr) - 1

    def nbytes(self) -> int:
        """SRAM bytes of the format: values, column indices, row pointers (and row ids)."""
        ids = self.stored_rows * INDEX_BYTES if self.fmt == "dcsr" else 0
        return self.nnz * (WORD_BYTES + INDEX_BYTES) + (self.stored_rows + 1) * INDEX_BYTES + ids


def block_shape(shape: tuple[int, int], px: int, py: int) -> tuple[int, int]:
    """(rows, columns) of every PE's block: rb = ceil(n_rows / py), cb = ceil(n_cols / px)."""
    return -(-shape[0] // py), -(-shape[1] // px)


def block_nnz(a: sp.csr_matrix, px: int, py: int) -> np.ndarray:
    """Non-zeros per PE block, shape (py, px)."""
    rb, cb = block_shape(a.shape, px, py)
    coo = a.tocoo()
    counts = np.bincount((coo.row // rb) * px + coo.col // cb, minlength=px * py)
    return counts.reshape(py, px)


def distinct(keys: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``keys`` (what ``np.unique`` gives; by sorting, which is
    much faster than its hash table on millions of integer keys)."""
    k = np.sort(keys)
    return k[np.concatenate(([True], k[1:] != k[:-1]))] if len(k) else k


def pe_bytes(a: sp.csr_matrix, px: int, py: int, layout: str, vector_words: int) -> int:
    """The largest SRAM footprint of any PE's data: its block in the format ``layout`` chooses
    (without building the blocks: counts only) plus ``vector_words`` FP32 words per block row and
    column (see :func:`workloads.wafer.spmv.vector_words`)."""
    rb, cb = block_shape(a.shape, px, py)
    coo = a.tocoo()
    # (int64: scipy's int32 indices overflow in pe * rb at the full array's 745,500 PEs)
    row, col = coo.row.astype(np.int64), coo.col.astype(np.int64)
    pe = (row // rb) * px + col // cb
    nnz = np.bincount(pe, minlength=px * py)
    nonempty_rows = np.bincount(distinct(pe * rb + row % rb) // rb, minlength=px * py)
    csr = nnz * (WORD_BYTES + INDEX_BYTES) + (rb + 1) * INDEX_BYTES
    dcsr = nnz * (WORD_BYTES + INDEX_BYTES) + (2 * nonempty_rows + 1) * INDEX_BYTES
    fmt = choose_format(nnz, rb, layout)
    data = np.where(fmt, dcsr, csr)
    return int(data.max()) + vector_words * WORD_BYTES


def choose_format(nnz: np.ndarray | int, rows: int, layout: str) -> np.ndarray:
    """True where a block is stored as DCSR: always (``dcsr``), never (``csr``), or when it
    has fewer non-zeros than rows (``auto``: a hypersparse block)."""
    if layout == "dcsr":
        return np.ones_like(nnz, dtype=bool)
    if layout == "csr":
        return np.zeros_like(nnz, dtype=bool)
    return np.asarray(nnz) < rows


class Blocks(Mapping[tuple[int, int], Block]):
    """Every PE's block, keyed (x, y), made when asked for: the non-zeros are sorted by PE once
    (one stable sort of the matrix's entries, no per-block slicing of the matrix), and a PE's
    :class:`Block` is cut from them on demand, so a full array's 745,500 blocks are never all
    held at once. The empty blocks (most of them when the matrix is sparser than the array is
    large) share one object per format."""

    def __init__(self, a: sp.csr_matrix, px: int, py: int, layout: str) -> None:
        self.px, self.py, self.layout = px, py, layout
        self.rb, self.cb = rb, cb = block_shape(a.shape, px, py)
        # (int64: scipy's int32 indices overflow in pe * rb at the full array's 745,500 PEs)
        row = np.repeat(np.arange(a.shape[0], dtype=np.int64), np.diff(a.indptr))
        col = a.indices.astype(np.int64)
        pe = (row // rb) * px + col // cb
        order = np.argsort(pe, kind="stable")  # CSR order within a PE: by row, then column
        self._row = (row[order] % rb).astype(np.uint16)
        self._col = (col[order] % cb).astype(np.uint16)
        self._val = a.data[order].astype(np.float32)
        self.nnz = np.bincount(pe, minlength=px * py)
        self._start = np.concatenate(([0], np.cumsum(self.nnz)))
        self.dcsr = choose_format(self.nnz, rb, layout)
        self._dcsr_flat = self.dcsr.reshape(-1)
        empty_u16, empty_f32 = np.zeros(0, np.uint16), np.zeros(0, np.float32)
        self._empty = {
            True: Block("dcsr", rb, cb, np.zeros(1, np.uint16), empty_u16, empty_u16, empty_f32),
            False: Block("csr", rb, cb, np.zeros(rb + 1, np.uint16),
                         np.arange(rb).astype(np.uint16), empty_u16, empty_f32),
        }  # fmt: skip

    def __getitem__(self, xy: tuple[int, int]) -> Block:
        x, y = xy
        if not (0 <= x < self.px and 0 <= y < self.py):
            raise KeyError(xy)
        k = y * self.px + x
        dcsr = self._dcsr_flat.item(k)  # (Python scalars: one call each)
        lo, hi = self._start.item(k), self._start.item(k + 1)
        if lo == hi:
            return self._empty[dcsr]
        rows = self._row[lo:hi]
        counts = np.bincount(rows, minlength=self.rb)
        if dcsr:
            ids = np.flatnonzero(counts)
            rowptr = np.concatenate(([0], np.cumsum(counts[ids])))
        else:
            ids = np.arange(self.rb)
            rowptr = np.concatenate(([0], np.cumsum(counts)))
        return Block(
            "dcsr" if dcsr else "csr", self.rb, self.cb, rowptr.astype(np.uint16),
            ids.astype(np.uint16), self._col[lo:hi], self._val[lo:hi],
        )  # fmt: skip

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((x, y) for y in range(self.py) for x in range(self.px))

    def __len__(self) -> int:
        return self.px * self.py


def split(a: sp.csr_matrix, px: int, py: int, layout: str) -> Blocks:
    """Every PE's block, keyed (x, y) (made on demand: see :class:`Blocks`)."""
    return Blocks(a, px, py, layout)
