"""Write ``mlp-scan.hlo.txt``: a stack of four 512-wide ReLU layers applied by ``jax.lax.scan``,
one data-parallel SGD step over 8 host CPU devices, as JAX prints it. XLA keeps the scan as a
``while`` loop with a known trip count (4), whose body slices the stacked weights
(``dynamic-slice``) and writes the stacked gradients in place (``dynamic-update-slice``).

Made with the helper of ``workloads/tpu/jaxhlo.py`` (needs ``pip install -e '.[jax]'``):
``python tests/data/hlo/make_hlo_scan.py``.
"""

import sys
from pathlib import Path

from workloads.tpu.jaxhlo import hlo_text, host_devices

HERE = Path(__file__).resolve().parent


def main() -> int:
    devices = host_devices(8)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(devices), ("d",))

    def loss(ws, x):
        def body(h, w):
            return jax.nn.relu(h @ w), None

        h, _ = jax.lax.scan(body, x, ws)
        return jnp.mean(h**2)

    def step(ws, x):
        return ws - 0.01 * jax.grad(loss)(ws, x)

    ws = jax.ShapeDtypeStruct((4, 512, 512), jnp.float32)
    x = jax.ShapeDtypeStruct((256, 512), jnp.float32)
    rep, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("d", None))
    text = hlo_text(step, ws, x, in_shardings=(rep, rows), out_shardings=rep)
    path = HERE / "mlp-scan.hlo.txt"
    path.write_text(text)
    print(f"wrote {path} ({len(text.splitlines())} lines), jax {jax.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
