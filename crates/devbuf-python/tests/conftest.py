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
