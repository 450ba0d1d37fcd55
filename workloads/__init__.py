"""workloads: scenarios, workload kinds lowered onto the hardware models, and the CLI.

A scenario (TOML) names a workload kind and its parameters; the kind builds the system on the
simcore kernel, runs it, reads its metrics, and carries an analytical model beside it for
``wafersim validate`` and ``wafersim model``. Fidelity is that of the hardware models used.
Kinds come in families, one subpackage per kind of hardware (``kernel``, ``wafer``, ``cluster``,
``tpu``, ``pim``), registered by :func:`workloads.registry.load_all`.

``__version__`` is wafersim's one version string: the package metadata reads it (pyproject's
``dynamic = ["version"]``) and every trace header records it.
"""

__version__ = "0.1.0"
