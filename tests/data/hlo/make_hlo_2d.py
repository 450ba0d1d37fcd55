"""Write ``mlp-2d.hlo.txt``: the MLP step of ``make_hlo.py`` over a 2-D mesh of 16 host CPU
devices, data parallel on one axis and tensor parallel (Megatron-style) on the other, as JAX
prints it. Its collectives run over groups that are rows or columns of the mesh: on a 4x4 TPU
slice, axes of the slice.

Needs the optional extra (``pip install -e '.[jax]'``): ``python tests/data/hlo/make_hlo_2d.py``.
The model is the one of ``make_hlo.py`` (its own 16-device process: XLA reads the device count
once, when JAX starts).
"""

import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=16"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

B, D, F = 256, 512, 1024  # global batch, model width, hidden width (as make_hlo.py)
LR = 0.01
HERE = Path(__file__).resolve().parent


def loss(params, x, y):
    h = jax.nn.relu(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return jax.tree_util.tree_map(lambda w, g: w - LR * g, params, grads)


def main() -> int:
    devices = jax.devices()
    if len(devices) != 16:
        print(f"expected 16 host devices, got {len(devices)}", file=sys.stderr)
        return 1
    mesh = Mesh(np.array(devices).reshape(4, 4), ("data", "model"))
    params = {
        "w1": jax.ShapeDtypeStruct((D, F), jnp.bfloat16),
        "w2": jax.ShapeDtypeStruct((F, D), jnp.bfloat16),
    }
    data = jax.ShapeDtypeStruct((B, D), jnp.bfloat16)
    ps = {"w1": NamedSharding(mesh, P(None, "model")), "w2": NamedSharding(mesh, P("model", None))}
    ds = NamedSharding(mesh, P("data", None))
    jitted = jax.jit(step, in_shardings=(ps, ds, ds), out_shardings=ps)
    text = jitted.lower(params, data, data).compile().as_text()
    path = HERE / "mlp-2d.hlo.txt"
    path.write_text(text)
    print(f"wrote {path} ({len(text.splitlines())} lines), jax {jax.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
