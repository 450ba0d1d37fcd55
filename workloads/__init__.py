"""workloads: scenarios, workload kinds lowered onto the hardware models, and the CLI.

A scenario (TOML) names a workload kind and its parameters; the kind builds the system on the
simcore kernel, runs it, reads its metrics, and carries an analytical model beside it for
``wafersim validate`` and ``wafersim model``. Fidelity is that of the hardware models used.
"""
