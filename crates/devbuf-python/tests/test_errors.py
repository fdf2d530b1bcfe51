"""devbuf's error kinds as Python exceptions, with devbuf's messages."""

import json
import os
import shutil

import pytest

import devbuf
from conftest import FIXTURES


def test_not_found():
    with pytest.raises(FileNotFoundError) as e:
        devbuf.open("/nonexistent/devbuf/a.zarr")
    assert "/nonexistent/devbuf/a.zarr" in str(e.value)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads any directory")
def test_permission_denied(tmp_path):
    d = tmp_path / "a.zarr"
    shutil.copytree(FIXTURES / "v3_float32.zarr", d)
    os.chmod(d / "zarr.json", 0)
    try:
        with pytest.raises(PermissionError):
            devbuf.open(d)
    finally:
        os.chmod(d / "zarr.json", 0o644)


def test_malformed_metadata(tmp_path):
    d = tmp_path / "bad.zarr"
    d.mkdir()
    (d / "zarr.json").write_text("{not json")
    with pytest.raises(devbuf.MalformedError) as e:
        devbuf.open(d)
    assert isinstance(e.value, ValueError)


def test_unsupported_codec(tmp_path):
    d = tmp_path / "lzma.zarr"
    shutil.copytree(FIXTURES / "v3_float32.zarr", d)
    meta = json.loads((d / "zarr.json").read_text())
    meta["codecs"][1] = {"name": "numcodecs.lzma", "configuration": {}}
    (d / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(devbuf.UnsupportedError) as e:
        devbuf.open(d)
    assert isinstance(e.value, NotImplementedError)
    assert "lzma" in str(e.value)


def test_corrupt_chunk_names_it(tmp_path):
    d = tmp_path / "corrupt.zarr"
    shutil.copytree(FIXTURES / "v3_float32.zarr", d)
    (d / "c" / "0" / "0").write_bytes(b"not zstd at all")
    a = devbuf.open(d)
    with pytest.raises(ValueError) as e:
        a.read()
    assert "c/0/0" in str(e.value) or "[0, 0]" in str(e.value)


def test_storage_options_for_a_path():
    with pytest.raises(ValueError, match="storage options are for URLs"):
        devbuf.open(FIXTURES / "v3_float32.zarr", region="x")


def test_selection_errors():
    a = devbuf.open(FIXTURES / "v3_float32.zarr")  # 10 x 7
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 10"):
        a[10]
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 7"):
        a[0, -8]
    with pytest.raises(IndexError, match="too many indices"):
        a[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., ...]
    with pytest.raises(ValueError, match="step must be positive"):
        a[::-1]
    with pytest.raises(IndexError, match="valid indices"):
        a[[0, 1]]
    with pytest.raises(IndexError, match="boolean"):
        a[True]
    with pytest.raises(TypeError):
        devbuf.open(3)


def test_not_a_url_scheme():
    with pytest.raises(Exception) as e:
        devbuf.open("nosuch://bucket/a.zarr")
    assert "nosuch" in str(e.value)


@pytest.mark.skipif(devbuf.is_available(), reason="this machine has a GPU")
def test_cuda_unavailable():
    assert devbuf.device_count() == 0
    assert devbuf.unavailable_reason()
    with pytest.raises(devbuf.CudaUnavailableError) as e:
        devbuf.Context(0)
    assert isinstance(e.value, RuntimeError)
    assert "CUDA is unavailable" in str(e.value)
    with pytest.raises(devbuf.CudaUnavailableError):
        devbuf.open(FIXTURES / "v3_float32.zarr").read(device=0)


def test_exception_hierarchy():
    assert issubclass(devbuf.InvalidArgumentError, ValueError)
    assert issubclass(devbuf.MalformedError, ValueError)
    assert issubclass(devbuf.UnsupportedError, NotImplementedError)
    assert issubclass(devbuf.OutOfBoundsError, IndexError)
    assert issubclass(devbuf.ReadOnlyError, ValueError)
    assert issubclass(devbuf.CudaUnavailableError, RuntimeError)
    assert issubclass(devbuf.CudaError, RuntimeError)
