"""Arrow Flight from Python (docs/python.md): devbuf's Flight server and client.

* ``Server(root, host="127.0.0.1", port=0, tokens=None)`` serves the zarr arrays under
  ``root`` (read-only) until ``shutdown()`` or the end of a ``with`` block, to clients
  presenting one of ``tokens`` (None: a random one, ``server.token``); ``uri`` says
  where.
* ``Client(uri, token=None, ...)`` (or ``await Client.connect_async(uri, ...)``) lists
  what a server offers (``list``) and reads selections of arrays into host memory or onto
  a GPU (``read(path, selection, device=None)`` -> ``devbuf.Array``), each call blocking
  (the GIL released) or as a coroutine (``list_async``, ``read_async``).

Example::

    import numpy as np
    from devbuf.flight import Client, Server

    with Server("/data/zarr") as server:
        client = Client(server.uri, token=server.token)
        part = np.asarray(client.read("images.zarr", (slice(0, 16), 3)))
"""

from ._devbuf import Client, Server

__all__ = ["Client", "Server"]
