"""pytest plugin of scripts/zarr-suite.sh, loaded into zarr-python's own test suite.

* With ``ZARR_CODEC_PIPELINE__PATH`` set, checks at start-up that zarr's config selects
  that pipeline (zarr's conftest resets the config before every test; ``config.reset()``
  re-reads the environment, so the variable stays in force for every test).
* At the end, writes ``devbuf.zarr.read_counts()`` of this process (each xdist worker
  its own) to ``$DEVBUF_SUITE_COUNTS_DIR/<worker>.json``: proof that the engine read.
* With ``DEVBUF_SUITE_GPU_ONLY=1``, keeps only zarr's GPU tests: those marked ``gpu`` and
  those its ``xp`` fixture runs with cupy (that fixture adds the mark only at set-up).
"""

import collections
import json
import logging
import os
import re

import pytest

# Why reads fell back (the pipeline logs each at DEBUG), numbers and quoted parts elided.
_FALLBACKS = collections.Counter()


class _FallbackLog(logging.Handler):
    def emit(self, record):
        try:
            why = str(record.args[0]) if record.args else record.getMessage()
        except Exception:  # noqa: BLE001
            return
        why = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", why)[:100]
        _FALLBACKS[why] += 1


def pytest_configure(config):
    want = os.environ.get("ZARR_CODEC_PIPELINE__PATH")
    if want and os.environ.get("DEVBUF_SUITE_COUNTS_DIR"):
        log = logging.getLogger("devbuf.zarr")
        log.addHandler(_FallbackLog(logging.DEBUG))
        log.setLevel(logging.DEBUG)
        log.propagate = False  # not into zarr's log capture
    if want:
        import zarr

        got = zarr.config.get("codec_pipeline.path")
        if got != want:
            raise pytest.UsageError(f"zarr's config selects {got!r}, not {want!r}")


def _is_gpu_test(item):
    if item.get_closest_marker("gpu") is not None:
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("xp") == "cupy"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if os.environ.get("DEVBUF_SUITE_GPU_ONLY") != "1":
        return
    keep = [it for it in items if _is_gpu_test(it)]
    drop = [it for it in items if not _is_gpu_test(it)]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("DEVBUF_SUITE_COUNTS_DIR")
    if not out:
        return
    try:
        from devbuf.zarr import read_counts
    except ImportError:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(out, f"{worker}.json"), "w") as f:
        json.dump({"counts": read_counts(), "fallbacks": dict(_FALLBACKS)}, f)
