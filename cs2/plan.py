"""The execution plan of weight-streamed GPT training, built as data (:class:`memoryx.plan.Entry`).

Per step, in the order MemoryX streams:

- **forward**: the embedding table E in row chunks (the wafers gather their tokens' rows), then
  for each layer: ``qkv`` chunks, the attention command, ``proj``, ``fc1``, ``fc2``; then the
  head's chunks and the loss command;
- **backward**, in two sweeps. First the activation gradients, layers in reverse: the head's
  W^T, then per layer ``fc2``, ``fc1``, ``proj``, the attention-gradient command, ``qkv``
  (rows of W^T: columns of W); the wafer keeps each matrix's output gradient. Then the weight
  gradients *in the order the forward pass streams the weights*: the embedding's gradient
  request, each layer's ``qkv``, ``proj``, ``fc1``, ``fc2``, the head: MemoryX sends the
  gradient-request masks (rows of W, forward order) and the wafer returns the FP32 gradients of
  those rows. So the first tensors of the next step are updated first, and their new weights
  stream while the wafer still computes the later layers' gradients: the round trip is hidden
  when that compute exceeds it.

Dependencies across steps (``needs``): a forward chunk of step s+1 waits for the update of the
same rows in step s (layer 1's new weights stream while step s's backward pass still runs); a
transposed chunk waits for all of its matrix's updates; with regrowth on, every chunk of a
matrix waits for all of them (the mask may change).

Sizes (``stream_bytes``, ``grad_bytes``): dense rows send FP16 values only (the wafer knows the
layout); sparse rows send FP16 value + 16-bit delta index per non-zero and a 2-byte row end.
Gradient requests cost nothing when dense (or with regrowth: everything is requested) and a
16-bit index per requested gradient when sparse; gradients return as FP32. Transposed rows of a
sparse matrix are counted at the matrix's average non-zeros per column. Every chunk carries
:data:`memoryx.plan.COMMAND_BYTES` of command. Chunks hold about ``chunk_bytes`` of forward
stream (at most one per row), on row boundaries that are multiples of ``align`` (the PE-level
sub-array's width).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from cs2.gpt import LAYER_MATRICES, Shape
from memoryx.plan import COMMAND_BYTES, Entry


@dataclasses.dataclass(frozen=True)
class Work:
    """What a wafer computes for one entry.

    ``op``: ``embed``, ``matmul`` (forward), ``attn``, ``loss``, ``dgrad`` (activation
    gradient), ``attn-grad``, ``embed-grad``, ``wgrad`` (weight gradient); ``tensor`` and ``layer``
    (-1: none); ``rows`` x ``width``: the streamed rows and their length; ``grad_rows`` x
    ``grad_width``: the gradient rows requested; ``density``: of the streamed rows;
    ``first``/``last``: the first/last chunk of this op (epilogues run after the last)."""

    op: str
    tensor: str = ""
    layer: int = -1
    rows: int = 0
    width: int = 0
    grad_rows: int = 0
    grad_width: int = 0
    density: float = 1.0
    first: bool = True
    last: bool = True

    def __str__(self) -> str:
        return f"{self.op} {self.tensor}".strip()

    def flops(self, sequence: int, hidden: int, seqs: int) -> int:
        """Floating-point operations of this work on ``seqs`` sequences of ``sequence`` tokens:
        2 per multiply-add of a matrix product, counting only the non-zero weights streamed or
        requested (the convention of "6 x tokens x parameters"). Attention's two products
        (QK^T and PV) count 2 x 2 S^2 H per sequence forward and twice that backward (the whole
        S x S score matrix, as the requirement formulas count it); the embedding (a gather),
        the loss and element-wise epilogues count none."""
        tokens = seqs * sequence
        if self.op == "matmul":
            return 2 * tokens * self.rows * nnz_per_row(self.width, self.density)
        if self.op == "dgrad":
            return round(2 * tokens * self.rows * self.width * self.density)
        if self.op == "wgrad":
            return round(2 * tokens * self.grad_rows * self.grad_width * self.density)
        if self.op == "attn":
            return 4 * sequence * hidden * tokens
        if self.op == "attn-grad":
            return 8 * sequence * hidden * tokens
        return 0


def split(n: int, parts: int, align: int) -> list[tuple[int, int]]:
    """``parts`` ranges covering 0..n, boundaries on multiples of ``align`` (fewer if n/align is
    smaller)."""
    units = max(1, n // align)
    parts = max(1, min(parts, units))
    cuts = [round(i * units / parts) * align for i in range(parts)] + [n]
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


@dataclasses.dataclass(frozen=True)
class PlanConfig:
    steps: int
    density: float  # of the decoder matrices
    chunk_bytes: int
    align: int = 1
    regrow: bool = False


def density_of(tensor: str, density: float) -> float:
    return 1.0 if tensor in ("emb", "head") else density


def nnz_per_row(cols: int, density: float) -> int:
    return cols if density >= 1.0 else max(1, round(density * cols))


def build_plan(shape: Shape, cfg: PlanConfig) -> list[Entry]:
    """The whole run's entries, steps after steps."""
    dims = {name: (r, c) for name, r, c in shape.tensors()}
    chunks = {}
    for name, (r, c) in dims.items():
        d = density_of(name, cfg.density)
        fwd = _fwd_bytes(r, c, d)
        n = math.ceil(fwd / cfg.chunk_bytes)
        chunks[name] = split(r, n, cfg.align)
    entries: list[Entry] = []

    def add(**kw: object) -> None:
        entries.append(Entry(index=len(entries), **kw))  # type: ignore[arg-type]

    def fwd_matrix(step: int, name: str, op: str, layer: int) -> None:
        c = dims[name][1]
        d = density_of(name, cfg.density)
        parts = chunks[name]
        for k, (lo, hi) in enumerate(parts):
            needs = ()
            if step > 0:
                needs = tuple((name, j) for j in range(len(parts))) if cfg.regrow else ((name, k),)
            add(
                step=step,
                pass_="fwd",
                tensor=name,
                order="fwd",
                lo=lo,
                hi=hi,
                stream_bytes=_fwd_bytes(hi - lo, c, d) + COMMAND_BYTES,
                needs=needs,
                work=Work(
                    op, name, layer, hi - lo, c, density=d, first=k == 0, last=k == len(parts) - 1
                ),
            )

    def dgrad_matrix(step: int, name: str, layer: int) -> None:
        """Rows of W^T (columns of W) for the activation gradient dX = dY · W."""
        r, c = dims[name]
        d = density_of(name, cfg.density)
        n = len(chunks[name])
        needs = tuple((name, j) for j in range(n)) if step > 0 else ()
        col_nnz = r * nnz_per_row(c, d) / c
        cparts = split(c, n, cfg.align)
        for k, (lo, hi) in enumerate(cparts):
            rows = hi - lo
            wt = rows * r * 2 if d >= 1.0 else math.ceil(rows * (col_nnz * 4 + 2))
            add(
                step=step,
                pass_="bwd",
                tensor=name,
                order="bwd",
                lo=lo,
                hi=hi,
                stream_bytes=wt + COMMAND_BYTES,
                needs=needs,
                work=Work(
                    "dgrad", name, layer, rows, r, density=col_nnz / r, first=k == 0,
                    last=k == len(cparts) - 1,
                ),
            )  # fmt: skip

    def wgrad_matrix(step: int, name: str, layer: int) -> None:
        """Gradient requests for rows of W (forward order); FP32 gradients come back."""
        c = dims[name][1]
        d = density_of(name, cfg.density)
        parts = chunks[name]
        sparse = d < 1.0 and not cfg.regrow
        per_row = nnz_per_row(c, d) if sparse else c
        for k, (glo, ghi) in enumerate(parts):
            add(
                step=step,
                pass_="bwd",
                tensor=name,
                order="fwd",
                lo=glo,
                hi=ghi,
                stream_bytes=((ghi - glo) * (per_row * 2 + 2) if sparse else 0) + COMMAND_BYTES,
                grad_bytes=(ghi - glo) * per_row * 4 + COMMAND_BYTES,
                glo=glo,
                ghi=ghi,
                key=(name, k),
                params=(ghi - glo) * c,
                weights=False,
                work=Work(
                    "wgrad", name, layer, 0, 0, ghi - glo, c, density=per_row / c,
                    first=k == 0, last=k == len(parts) - 1,
                ),
            )  # fmt: skip

    def command(step: int, pass_: str, op: str, layer: int) -> None:
        add(
            step=step,
            pass_=pass_,
            tensor="",
            order=pass_,
            lo=0,
            hi=0,
            stream_bytes=COMMAND_BYTES,
            work=Work(op, "", layer),
        )

    for step in range(cfg.steps):
        fwd_matrix(step, "emb", "embed", -1)
        for layer in range(shape.layers):
            for name, *_ in LAYER_MATRICES:
                fwd_matrix(step, f"l{layer}.{name}", "matmul", layer)
                if name == "qkv":
                    command(step, "fwd", "attn", layer)
        fwd_matrix(step, "head", "matmul", shape.layers)
        command(step, "fwd", "loss", shape.layers)
        dgrad_matrix(step, "head", shape.layers)
        for layer in reversed(range(shape.layers)):
            for name, *_ in reversed(LAYER_MATRICES):
                if name == "qkv":
                    command(step, "bwd", "attn-grad", layer)
                dgrad_matrix(step, f"l{layer}.{name}", layer)
        _embed_grad(add, step, dims["emb"], chunks["emb"])
        for layer in range(shape.layers):
            for name, *_ in LAYER_MATRICES:
                wgrad_matrix(step, f"l{layer}.{name}", layer)
        wgrad_matrix(step, "head", shape.layers)
    return entries


def _embed_grad(add: object, step: int, dims: tuple[int, int], parts: list) -> None:
    """The embedding's gradient request (dense: a command per chunk) and FP32 rows back."""
    c = dims[1]
    for k, (lo, hi) in enumerate(parts):
        add(
            step=step,
            pass_="bwd",
            tensor="emb",
            order="fwd",
            lo=lo,
            hi=hi,  # type: ignore[operator]
            stream_bytes=COMMAND_BYTES,
            grad_bytes=(hi - lo) * c * 4 + COMMAND_BYTES,
            glo=lo,
            ghi=hi,
            key=("emb", k),
            params=(hi - lo) * c,
            weights=False,
            work=Work(
                "embed-grad", "emb", -1, 0, 0, hi - lo, c, first=k == 0, last=k == len(parts) - 1
            ),
        )


def _fwd_bytes(rows: int, cols: int, density: float) -> int:
    if density >= 1.0:
        return rows * cols * 2
    return rows * (nnz_per_row(cols, density) * 4 + 2)
