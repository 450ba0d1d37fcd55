"""The examples in docs/wafer/programming.md run, and do what the text says."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

DOC = Path(__file__).resolve().parent.parent / "docs" / "wafer" / "programming.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_complete_kernel_runs(capsys):
    (code,) = blocks()
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    out = capsys.readouterr().out
    assert out.startswith("completed ")
    wafer = namespace["wafer"]
    # every PE received the root's data and added it into acc
    for x in range(namespace["N"]):
        ce = wafer.ce(x, 0)
        addr = ce.sram.buffers["acc"][0]
        np.testing.assert_array_equal(ce.sram.view(addr, "f32", 64), namespace["data"])
