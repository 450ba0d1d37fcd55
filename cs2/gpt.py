"""GPT decoder stacks: the model table, their tensors, and the numpy function of every piece.

Architecture (per layer, pre-residual, no layer norm): qkv = x·Wqkv^T; causal multi-head
attention a = attn(qkv); h = x + a·Wo^T; u = h·W1^T; y = h + gelu(u)·W2^T. An embedding table
E [V][H] feeds the stack (x0 = E[tokens]) and an untied head Wh [V][H] gives the logits; the
loss is the cross-entropy of the next token, averaged over the *global* batch, so each system's
gradient is its share and SwarmX's sum is the data-parallel gradient. Parameters: 12·L·H^2 +
2·V·H (biases, layer norms and positional embeddings are left out: element-wise work of O(H)
parameters).

Every piece has a numpy function on FP32 activations (weights as streamed: FP16 values, made
FP32), used by the wafer-level CS-2 for its results and by :func:`reference_step`, an
independent whole-batch implementation the functional tests compare with.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

#: The spec's table: P, L, H, S, training tokens, batch (tokens); vocabulary chosen (GPT-2 BPE,
#: Megatron's padded 51,200), heads from the papers.
MODELS: dict[str, dict[str, float]] = {
    "gpt2-xl": dict(
        params=1.5e9,
        layers=48,
        hidden=1600,
        sequence=1024,
        tokens=3.00e11,
        batch_tokens=5.24e5,
        vocab=50257,
        heads=25,
    ),
    "megatron-8.3b": dict(
        params=8.3e9,
        layers=72,
        hidden=3072,
        sequence=1024,
        tokens=1.57e11,
        batch_tokens=1.1e6,
        vocab=51200,
        heads=32,
    ),
    "turing-nlg": dict(
        params=1.72e10,
        layers=78,
        hidden=4256,
        sequence=1024,
        tokens=1.57e11,
        batch_tokens=5.24e5,
        vocab=51200,
        heads=28,
    ),
    "gpt3-175b": dict(
        params=1.75e11,
        layers=96,
        hidden=12288,
        sequence=2048,
        tokens=3.00e11,
        batch_tokens=3.2e6,
        vocab=50257,
        heads=96,
    ),
    "mt-nlg-530b": dict(
        params=5.3e11,
        layers=105,
        hidden=20480,
        sequence=2048,
        tokens=2.7e11,
        batch_tokens=3.9e6,
        vocab=51200,
        heads=128,
    ),
}

#: The per-layer weight matrices: name, (rows, cols) in units of H.
LAYER_MATRICES = (("qkv", 3, 1), ("proj", 1, 1), ("fc1", 4, 1), ("fc2", 1, 4))


@dataclasses.dataclass(frozen=True)
class Shape:
    """A GPT's dimensions."""

    layers: int
    hidden: int
    sequence: int
    vocab: int
    heads: int

    def tensors(self) -> list[tuple[str, int, int]]:
        """Every weight tensor (name, rows, cols), in forward order."""
        out = [("emb", self.vocab, self.hidden)]
        for layer in range(self.layers):
            for name, r, c in LAYER_MATRICES:
                out.append((f"l{layer}.{name}", r * self.hidden, c * self.hidden))
        out.append(("head", self.vocab, self.hidden))
        return out

    @property
    def params(self) -> int:
        return sum(r * c for _, r, c in self.tensors())


# -- the function of each piece ------------------------------------------------------------------
def gelu(u: np.ndarray) -> np.ndarray:
    c = np.float32(math.sqrt(2 / math.pi))
    return (0.5 * u * (1 + np.tanh(c * (u + np.float32(0.044715) * u**3)))).astype(np.float32)


def gelu_grad(u: np.ndarray) -> np.ndarray:
    c = np.float32(math.sqrt(2 / math.pi))
    t = np.tanh(c * (u + np.float32(0.044715) * u**3))
    d = 0.5 * (1 + t) + 0.5 * u * (1 - t * t) * c * (1 + 3 * np.float32(0.044715) * u * u)
    return d.astype(np.float32)


def _heads(x: np.ndarray, seqs: int, heads: int) -> np.ndarray:
    """[T][H] -> [seqs][heads][S][dh]."""
    t, h = x.shape
    return x.reshape(seqs, t // seqs, heads, h // heads).transpose(0, 2, 1, 3)


def _merge(x: np.ndarray) -> np.ndarray:
    s, nh, n, dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(s * n, nh * dh)


def attention(qkv: np.ndarray, seqs: int, heads: int) -> tuple[np.ndarray, np.ndarray]:
    """Causal multi-head attention: (a [T][H], probabilities [seqs][heads][S][S])."""
    h = qkv.shape[1] // 3
    q, k, v = (_heads(qkv[:, i * h : (i + 1) * h], seqs, heads) for i in range(3))
    n = q.shape[2]
    scores = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(h // heads))
    scores = np.where(np.tril(np.ones((n, n), bool)), scores, np.float32(-1e30))
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p = (p / p.sum(axis=-1, keepdims=True)).astype(np.float32)
    return _merge(p @ v).astype(np.float32), p


def attention_grad(
    da: np.ndarray, qkv: np.ndarray, p: np.ndarray, seqs: int, heads: int
) -> np.ndarray:
    """d qkv [T][3H] from d a [T][H]."""
    h = qkv.shape[1] // 3
    q, k, v = (_heads(qkv[:, i * h : (i + 1) * h], seqs, heads) for i in range(3))
    dout = _heads(da, seqs, heads)
    dv = p.transpose(0, 1, 3, 2) @ dout
    dp = dout @ v.transpose(0, 1, 3, 2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    ds = ds / np.float32(math.sqrt(h // heads))
    dq = ds @ k
    dk = ds.transpose(0, 1, 3, 2) @ q
    return np.concatenate([_merge(dq), _merge(dk), _merge(dv)], axis=1).astype(np.float32)


def loss_grad(
    logits: np.ndarray, targets: np.ndarray, global_tokens: int
) -> tuple[float, np.ndarray]:
    """(summed loss / global tokens, d logits) of the next-token cross-entropy."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e / e.sum(axis=1, keepdims=True)
    rows = np.arange(len(targets))
    loss = float(-np.log(s[rows, targets]).sum()) / global_tokens
    d = s.copy()
    d[rows, targets] -= 1
    return loss, (d / np.float32(global_tokens)).astype(np.float32)


def init_weights(
    shape: Shape, density: float, seed: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Seeded FP32 weights and masks: decoder matrices at ``density`` (exactly round(density ·
    cols) non-zeros per row), embedding and head dense."""
    rng = np.random.default_rng([seed, 11])
    out = {}
    for name, r, c in shape.tensors():
        w = (rng.standard_normal((r, c)) / math.sqrt(c)).astype(np.float32)
        mask = np.ones((r, c), bool)
        if density < 1.0 and name not in ("emb", "head"):
            k = max(1, round(density * c))
            mask = np.zeros((r, c), bool)
            for i in range(r):
                mask[i, rng.choice(c, k, replace=False)] = True
        out[name] = (w, mask)
    return out


def batch(shape: Shape, sequences: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded token ids [sequences][S] and their next-token targets."""
    rng = np.random.default_rng([seed, 12])
    ids = rng.integers(0, shape.vocab, (sequences, shape.sequence + 1))
    return ids[:, :-1], ids[:, 1:]


def reference_step(
    shape: Shape, weights: dict[str, np.ndarray], tokens: np.ndarray, targets: np.ndarray
) -> tuple[float, dict[str, np.ndarray]]:
    """The whole batch's loss and FP32 weight gradients, all at once (no chunks, no shards):
    the functional checks' reference. ``weights`` are the values the wafers compute with."""
    seqs = tokens.shape[0]
    ids = tokens.reshape(-1)
    t = len(ids)
    x = weights["emb"][ids]
    saved = []
    for layer in range(shape.layers):
        wq, wo, w1, w2 = (weights[f"l{layer}.{n}"] for n, *_ in LAYER_MATRICES)
        qkv = x @ wq.T
        a, p = attention(qkv, seqs, shape.heads)
        h = x + a @ wo.T
        u = h @ w1.T
        g = gelu(u)
        y = h + g @ w2.T
        saved.append((x, qkv, a, p, h, u, g))
        x = y
    logits = x @ weights["head"].T
    loss, dlog = loss_grad(logits, targets.reshape(-1), t)
    grads = {"head": dlog.T @ x}
    dy = dlog @ weights["head"]
    for layer in reversed(range(shape.layers)):
        x, qkv, a, p, h, u, g = saved[layer]
        wq, wo, w1, w2 = (weights[f"l{layer}.{n}"] for n, *_ in LAYER_MATRICES)
        grads[f"l{layer}.fc2"] = dy.T @ g
        du = (dy @ w2) * gelu_grad(u)
        grads[f"l{layer}.fc1"] = du.T @ h
        dh = dy + du @ w1
        grads[f"l{layer}.proj"] = dh.T @ a
        dqkv = attention_grad(dh @ wo, qkv, p, seqs, shape.heads)
        grads[f"l{layer}.qkv"] = dqkv.T @ x
        dy = dh + dqkv @ wq
    demb = np.zeros_like(weights["emb"])
    np.add.at(demb, ids, dy)
    grads["emb"] = demb
    return loss, grads
