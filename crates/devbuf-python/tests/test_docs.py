"""The examples of docs/python.md run: blocks fenced ```python on the host, blocks fenced
```python gpu where there is a GPU with cupy and torch."""

import os
import re

import pytest

import devbuf
from conftest import ROOT

DOC = ROOT / "docs" / "python.md"
BLOCKS = re.findall(r"```python( gpu)?\n(.*?)```", DOC.read_text(), re.S)


def gpu_missing():
    if not devbuf.is_available():
        return f"no GPU: {devbuf.unavailable_reason()}"
    for mod in ("cupy", "torch"):
        try:
            __import__(mod)
        except Exception as e:
            return f"{mod} is not importable ({e})"
    return None


def test_the_doc_has_examples():
    assert sum(1 for gpu, _ in BLOCKS if not gpu) >= 2
    assert sum(1 for gpu, _ in BLOCKS if gpu) >= 1


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example(index, monkeypatch):
    gpu, code = BLOCKS[index]
    if gpu:
        why = gpu_missing()
        if why:
            pytest.skip(f"GPU example: {why}")
    if "import pyarrow" in code:
        pytest.importorskip("pyarrow", reason="the example consumes with pyarrow")
    if "import zarr" in code:
        pytest.importorskip("zarr", reason="the example reads through zarr-python")
    for mod in ("dask", "distributed", "xarray"):
        if f"import {mod}" in code or f"from {mod} " in code:
            pytest.importorskip(mod, reason=f"the example runs on {mod}")
    monkeypatch.chdir(ROOT)
    exec(compile(code, f"{DOC}:block{index}", "exec"), {"__name__": "__doc_example__"})
    assert os.getcwd() == str(ROOT)
