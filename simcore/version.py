"""wafersim's one version string.

The package metadata reads it (pyproject's ``dynamic = ["version"]``), ``wafersim --version``
prints it, and every trace header and sweep configuration hash records it. It lives in the
kernel because the runner and the sweeps record it and must not import the application.
"""

__version__ = "0.1.0"
