"""Write the HLO texts in this folder: one training step of a small MLP, SPMD-partitioned by
XLA over 8 host CPU devices under three shardings, as JAX prints them
(``jax.jit(f).lower(...).compile().as_text()``).

The texts are committed so that nothing of the default test tier needs JAX. To make them again
(needs the optional extra, ``pip install -e '.[jax]'``):

    python tests/data/hlo/make_hlo.py

The MLP: x[B, D] -> relu(x·W1[D, F]) -> ·W2[F, D], mean squared error against y[B, D]; the step
takes the gradient and updates W1 and W2 by SGD. Shardings over a 1-D mesh of 8 devices, "d":

- ``mlp-dp``: data parallel: x and y split by rows, W1 and W2 replicated (the gradients are
  all-reduced);
- ``mlp-fsdp``: fully sharded: x and y split by rows, W1 and W2 split too (all-gathered for
  use, the gradients reduce-scattered);
- ``mlp-tp``: tensor parallel (Megatron-style): W1 split by columns, W2 by rows, x and y
  replicated (the second matmul's partial sums all-reduced).
"""

import os
import sys
from pathlib import Path

# Before importing jax, which reads XLA_FLAGS when it starts: 8 host devices.
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

B, D, F = 256, 512, 1024  # global batch, model width, hidden width
LR = 0.01
HERE = Path(__file__).resolve().parent


def loss(params, x, y):
    h = jax.nn.relu(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return jax.tree_util.tree_map(lambda w, g: w - LR * g, params, grads)


SHARDINGS = {
    "mlp-dp": ({"w1": P(), "w2": P()}, P("d", None)),
    "mlp-fsdp": ({"w1": P("d", None), "w2": P(None, "d")}, P("d", None)),
    "mlp-tp": ({"w1": P(None, "d"), "w2": P("d", None)}, P()),
}


def main() -> int:
    devices = jax.devices()
    if len(devices) != 8:
        print(f"expected 8 host devices, got {len(devices)}", file=sys.stderr)
        return 1
    mesh = Mesh(np.array(devices), ("d",))
    params = {
        "w1": jax.ShapeDtypeStruct((D, F), jnp.bfloat16),
        "w2": jax.ShapeDtypeStruct((F, D), jnp.bfloat16),
    }
    data = jax.ShapeDtypeStruct((B, D), jnp.bfloat16)
    for name, (pspec, dspec) in SHARDINGS.items():
        ps = {k: NamedSharding(mesh, v) for k, v in pspec.items()}
        ds = NamedSharding(mesh, dspec)
        jitted = jax.jit(step, in_shardings=(ps, ds, ds), out_shardings=ps)
        text = jitted.lower(params, data, data).compile().as_text()
        path = HERE / f"{name}.hlo.txt"
        path.write_text(text)
        print(f"wrote {path} ({len(text.splitlines())} lines), jax {jax.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
