"""Where a zarr-python store keeps an array, when devbuf's engine can reach it itself
(internal, for ``devbuf.zarr``): a ``LocalStore``'s (or obstore ``LocalStore``'s)
directory, or an obstore object store's URL with its configuration."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zarr.abc.store import Store

def _local_root(store: Store) -> str | None:
    try:
        from zarr.storage import LocalStore
    except ImportError:  # pragma: no cover
        return None
    if isinstance(store, LocalStore):
        return os.fspath(store.root)
    return None


def _obstore_local_root(store: Store) -> str | None:
    """The directory of a ``zarr.storage.ObjectStore`` on obstore's ``LocalStore``."""
    try:
        from zarr.storage import ObjectStore
    except ImportError:  # pragma: no cover
        return None
    if isinstance(store, ObjectStore) and type(store.store).__name__ == "LocalStore":
        prefix = getattr(store.store, "prefix", None)
        return None if prefix is None else os.fspath(prefix)
    return None


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def _url_of(store: Store, prefix: str) -> tuple[str, dict[str, Any]] | None:
    """(URL, storage options) of the array at ``prefix`` in an obstore-backed
    ``zarr.storage.ObjectStore`` the engine can open itself (S3, GCS, Azure, HTTP), or
    None (other stores, and stores whose credentials come from a Python callback)."""
    try:
        from zarr.storage import ObjectStore
    except ImportError:  # pragma: no cover - zarr without obstore support
        return None
    if not isinstance(store, ObjectStore):
        return None
    inner = getattr(store, "store", None)
    kind = type(inner).__name__
    if getattr(inner, "credential_provider", None) is not None:
        return None
    config = dict(getattr(inner, "config", None) or {})
    options: dict[str, Any] = {}
    for k, v in (getattr(inner, "client_options", None) or {}).items():
        options[k] = v
    base = getattr(inner, "prefix", None) or ""
    base = str(base)
    if kind == "S3Store" and "bucket" in config:
        url = "s3://" + _join(config.pop("bucket"), base, prefix)
    elif kind == "GCSStore" and "bucket" in config:
        url = "gs://" + _join(config.pop("bucket"), base, prefix)
    elif kind == "AzureStore" and "container_name" in config:
        url = "az://" + _join(config.pop("container_name"), base, prefix)
    elif kind == "HTTPStore" and getattr(inner, "url", None):
        return str(inner.url).rstrip("/") + "/" + _join(base, prefix), options
    else:
        return None
    for k, v in config.items():
        options[k] = v
    if store.read_only:
        options["read_only"] = True
    return url, options
