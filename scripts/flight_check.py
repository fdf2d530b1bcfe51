#!/usr/bin/env python3
"""An independent client of devbuf's Flight server: pyarrow.flight.

    flight_check.py --uri grpc://127.0.0.1:8815 --token-file TOKEN [--tls-ca PEM]
                    [--basic USER:PASSWORD] check
    flight_check.py --uri URI --token-file TOKEN bench --path ARRAY [--repeat 3]

`check` (against `flight_server --demo`): every call without the token (or with a
wrong one) is refused as unauthenticated; with it, ListFlights lists the demo arrays,
GetFlightInfo gives several endpoints and a schema whose chunk column is
arrow.fixed_shape_tensor, and DoGet of every endpoint returns chunks that, put
together, equal the formulas the demo arrays were written from (missing chunks read
as the fill value). With --basic, the Basic-auth handshake (authenticate_basic_token)
issues a token that works. Exits 1 with a message on any difference.

`bench`: fetches every endpoint of ARRAY concurrently (one thread per endpoint) and
prints one JSON line {"seconds": best, "bytes": ..., "gbps": ...}.

Needs pyarrow (with flight) and numpy.
"""

import argparse
import json
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight


def fail(msg):
    print(f"FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def connect(args):
    kw = {}
    if args.tls_ca:
        with open(args.tls_ca, "rb") as f:
            kw["tls_root_certs"] = f.read()
        kw["override_hostname"] = "localhost"
    return flight.connect(args.uri, **kw)


def options(token):
    if token is None:
        return flight.FlightCallOptions()
    return flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])


def expect_unauthenticated(what, fn):
    try:
        fn()
    except flight.FlightUnauthenticatedError as e:
        print(f"ok  refused without a valid token: {what} ({str(e).splitlines()[0][:80]})")
        return
    except flight.FlightError as e:
        fail(f"{what}: expected Unauthenticated, got {type(e).__name__}: {e}")
    fail(f"{what} succeeded without a valid token")


def f32_value(i, j):
    return ((i * 7919 + j * 104729) % 65521).astype(np.float32) / np.float32(8.0) - np.float32(1000.0)


def i16_value(i, j):
    v = ((i * 31 + j * 17) % 2000 - 1000).astype(np.int16)
    missing = ((i // 10) + (j // 10)) % 3 == 0
    return np.where(missing, np.int16(-7), v)


def assemble(client, opts, path, shape, dtype):
    """Fetches every endpoint of `path` and puts the chunks together."""
    info = client.get_flight_info(flight.FlightDescriptor.for_path("zarr", *path.split("/")), opts)
    if len(info.endpoints) < 2:
        fail(f"{path}: {len(info.endpoints)} endpoint(s), expected several")
    field = info.schema.field("chunk")
    if not isinstance(field.type, pa.FixedShapeTensorType):
        fail(f"{path}: the chunk column is {field.type}, not arrow.fixed_shape_tensor")
    if field.type.extension_name != "arrow.fixed_shape_tensor":
        fail(f"{path}: extension name {field.type.extension_name}")
    chunk = tuple(field.type.shape)
    for d in range(len(shape)):
        if info.schema.field(f"coord_{d}").type != pa.uint64():
            fail(f"{path}: coord_{d} is not uint64")
    out = np.full(shape, 0, dtype=dtype)
    seen = np.zeros(shape, dtype=bool)
    rows = 0
    for ep in info.endpoints:
        table = client.do_get(ep.ticket, opts).read_all()
        rows += table.num_rows
        tensors = table.column("chunk").combine_chunks().to_numpy_ndarray()
        coords = [table.column(f"coord_{d}").to_numpy() for d in range(len(shape))]
        for k in range(table.num_rows):
            start = [int(coords[d][k]) * chunk[d] for d in range(len(shape))]
            end = [min(start[d] + chunk[d], shape[d]) for d in range(len(shape))]
            sl = tuple(slice(start[d], end[d]) for d in range(len(shape)))
            cut = tuple(slice(0, end[d] - start[d]) for d in range(len(shape)))
            if seen[sl].any():
                fail(f"{path}: chunk {start} arrived twice")
            out[sl] = tensors[k][cut]
            seen[sl] = True
    if rows != info.total_records:
        fail(f"{path}: {rows} chunks arrived, the flight announced {info.total_records}")
    if not seen.all():
        fail(f"{path}: part of the array never arrived")
    return out, len(info.endpoints)


def check(args, token):
    client = connect(args)
    bad = options("not-the-token")
    desc = flight.FlightDescriptor.for_path("zarr", "demo", "f32.zarr")
    for opts, label in ((options(None), "no token"), (bad, "a wrong token")):
        expect_unauthenticated(f"ListFlights with {label}", lambda: list(client.list_flights(options=opts)))
        expect_unauthenticated(f"GetFlightInfo with {label}", lambda: client.get_flight_info(desc, opts))
    good = options(token)
    ticket = client.get_flight_info(desc, good).endpoints[0].ticket
    expect_unauthenticated("DoGet with no token", lambda: client.do_get(ticket, options(None)).read_all())
    expect_unauthenticated("DoGet with a wrong token", lambda: client.do_get(ticket, bad).read_all())

    listed = {tuple(f.descriptor.path) for f in client.list_flights(options=good)}
    for want in ((b"zarr", b"demo", b"f32.zarr"), (b"zarr", b"demo", b"i16.zarr")):
        if want not in listed:
            fail(f"ListFlights lacks {want}: {sorted(listed)[:10]}")
    print(f"ok  ListFlights lists {len(listed)} flights, the demo arrays among them")

    i, j = np.meshgrid(np.arange(100, dtype=np.int64), np.arange(70, dtype=np.int64), indexing="ij")
    got, n = assemble(client, good, "demo/f32.zarr", (100, 70), np.float32)
    if not np.array_equal(got, f32_value(i, j)):
        fail("demo/f32.zarr differs from its formula")
    print(f"ok  demo/f32.zarr: 100 x 70 float32 from {n} endpoints equals its formula")
    i, j = np.meshgrid(np.arange(50, dtype=np.int64), np.arange(40, dtype=np.int64), indexing="ij")
    got, n = assemble(client, good, "demo/i16.zarr", (50, 40), np.int16)
    if not np.array_equal(got, i16_value(i, j)):
        fail("demo/i16.zarr differs from its formula (fill value -7 in missing chunks)")
    print(f"ok  demo/i16.zarr: 50 x 40 int16 from {n} endpoints (missing chunks = fill value)")

    try:
        client.do_get(flight.Ticket(b'{"v":1,"array":"../etc","start":[0],"end":[1],"range":[0,1]}'), good).read_all()
        fail("a ticket with '..' was served")
    except (flight.FlightError, pa.ArrowException) as e:
        if "not allowed" not in str(e):
            fail(f"a '..' ticket: unexpected error {type(e).__name__}: {e}")
    print("ok  a ticket with '..' is refused")

    if args.basic:
        user, password = args.basic.split(":", 1)
        fresh = connect(args)
        header = fresh.authenticate_basic_token(user.encode(), password.encode())
        opts = flight.FlightCallOptions(headers=[header])
        n = len(list(fresh.list_flights(options=opts)))
        print(f"ok  the Basic handshake issued a token that lists {n} flights")
        expect_unauthenticated(
            "a handshake with a wrong password",
            lambda: connect(args).authenticate_basic_token(user.encode(), b"wrong"),
        )
    print("flight_check: all checks passed")


def bench(args, token):
    client = connect(args)
    opts = options(token)
    desc = flight.FlightDescriptor.for_path("zarr", *args.path.split("/"))
    best = None
    total = 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        info = client.get_flight_info(desc, opts)
        sizes = [0] * len(info.endpoints)
        errors = []

        def fetch(k, ep):
            try:
                c = connect(args)
                t = c.do_get(ep.ticket, opts).read_all()
                sizes[k] = t.nbytes
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=fetch, args=(k, ep)) for k, ep in enumerate(info.endpoints)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            fail(f"bench: {errors[0]}")
        dt = time.perf_counter() - t0
        total = sum(sizes)
        best = dt if best is None else min(best, dt)
    print(json.dumps({"seconds": best, "bytes": total, "gbps": total / best / 1e9, "pyarrow": pa.__version__}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--uri", required=True)
    p.add_argument("--token-file")
    p.add_argument("--token")
    p.add_argument("--tls-ca")
    p.add_argument("--basic")
    p.add_argument("--path", default="demo/f32.zarr")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("command", choices=["check", "bench"])
    args = p.parse_args()
    token = args.token
    if args.token_file:
        with open(args.token_file) as f:
            token = f.read().strip()
    if token is None:
        fail("give --token-file or --token")
    (check if args.command == "check" else bench)(args, token)


if __name__ == "__main__":
    main()
