"""Shared fixtures: the zarr fixtures of the workspace (tests/fixtures/zarr)."""

import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "zarr"


def manifest():
    return json.loads((FIXTURES / "manifest.json").read_text())["fixtures"]


@pytest.fixture(scope="session")
def fixtures_dir():
    return FIXTURES


def cupy_gpu_reason():
    """Why the cupy tests cannot run here (cupy missing, no GPU), or None."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "cupy is not installed"
    import devbuf

    if not devbuf.is_available():
        return f"no GPU: {devbuf.unavailable_reason()}"
    return None
