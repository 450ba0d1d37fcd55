"""workloads: the families' workload kinds, validation cases, scenarios and calibration.

A scenario (TOML) names a workload kind and its parameters; the kind builds the system on the
simcore kernel, runs it, reads its metrics, and carries an analytical model beside it for
``wafersim validate`` and ``wafersim model``. Fidelity is that of the hardware models used.
Kinds come in families, one subpackage per kind of hardware (``kernel``, ``wafer``, ``cluster``,
``tpu``, ``pim``), registered by :func:`runner.registry.load_all`.
"""
