"""Make the HLO text ``tpu-hlo`` reads from a Python function, with JAX on the host CPU.

Needs the optional extra (``pip install -e '.[jax]'``); nothing else in wafersim imports JAX.
XLA partitions the function over ``n`` host CPU devices exactly as it would over ``n`` TPU
chips (the SPMD partitioner is the same), so the module has the collectives a TPU compile has;
what differs is said in docs/workloads-from-outside.md (f32 matmuls, synchronous collectives).

    from workloads.tpu.jaxhlo import host_devices, hlo_text
    devices = host_devices(8)             # before anything else imports jax
    import jax, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(devices), ("d",))
    text = hlo_text(step, params, x, in_shardings=..., out_shardings=...)
    Path("step.hlo.txt").write_text(text)

then ``wafersim run tpu-hlo --set hlo=step.hlo.txt --set topology=2x4``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from simcore.errors import WafersimError

FLAG = "--xla_force_host_platform_device_count"


def host_devices(n: int) -> list[Any]:
    """``n`` host CPU devices for JAX: sets ``XLA_FLAGS`` before JAX starts, then imports it.
    If JAX already started with another count, that cannot change: a clear error says so."""
    if n < 1:
        raise WafersimError(f"host_devices({n}): the device count must be at least 1")
    if "jax" not in sys.modules:
        flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(FLAG)]
        os.environ["XLA_FLAGS"] = " ".join([*flags, f"{FLAG}={n}"])
    try:
        import jax
    except ImportError:
        raise WafersimError(
            "JAX is not installed: pip install -e '.[jax]' (an optional extra; wafersim runs "
            "HLO texts without it)"
        ) from None
    devices = jax.devices("cpu")
    if len(devices) != n:
        raise WafersimError(
            f"JAX started with {len(devices)} host devices, not {n}: call host_devices({n}) "
            "before anything imports jax (XLA reads its flags once)"
        )
    return list(devices)


def hlo_text(fn: Callable[..., Any], *args: Any, **jit_kwargs: Any) -> str:
    """The compiled, SPMD-partitioned module of ``jax.jit(fn, **jit_kwargs)`` on ``args``
    (arrays or ``jax.ShapeDtypeStruct``), as ``compile().as_text()`` prints it."""
    import jax

    return str(jax.jit(fn, **jit_kwargs).lower(*args).compile().as_text())
