//! Flight round trips on the host, servers on 127.0.0.1 ephemeral ports: every fixture
//! array (all data types, C and F order, every codec, sharding, missing chunks read as
//! the fill value) and random arrays with random selections, read through a server
//! and compared byte for byte with the same read done locally; chunk batches as
//! received; registered and uploaded record batches; two servers each serving half an
//! array; TLS; a plain arrow-flight client.
#![cfg(feature = "flight")]

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{Array, Float32Array, Int64Array, RecordBatch};
use devbuf::__test::flight::ticket::Part;
use devbuf::ElementType;
use devbuf::arrow::{CHUNK_COLUMN, FIXED_SHAPE_TENSOR};
use devbuf::flight::{Client, Query, Server, Target, Tls};
use devbuf::zarr::{AxisSel, BufferPrototype, Dtype, Scalar, Slice};
use devbuf::zarr::{Compressor, ZarrArray};
use rand::Rng;
use rand::rngs::SmallRng;

#[path = "common/arrays.rs"]
mod arrays;
#[path = "common/batches.rs"]
mod batches;
#[path = "common/flight.rs"]
mod flight_common;
#[path = "common/random.rs"]
mod random;
#[path = "common/zarrs.rs"]
mod zarrs_common;

use flight_common::{bytes_of, config, opts, random_array, serve};
use zarrs_common::TempDir;

const HOST: BufferPrototype = BufferPrototype::Host;
const FIXTURES: &str = "tests/fixtures/zarr";

#[test]
fn every_fixture_array_reads_back_bit_for_bit() {
    let server = serve(std::path::Path::new(FIXTURES), |c| c.endpoints = 3);
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(FIXTURES)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".zarr"))
        .collect();
    names.sort();
    assert!(names.len() > 60, "{names:?}");
    let (mut read, mut f_order) = (0, 0);
    for name in &names {
        let local = ZarrArray::open(format!("{FIXTURES}/{name}")).unwrap();
        if local.shape().is_empty() {
            let e = client.read(name, .., &HOST).unwrap_err().to_string();
            assert!(
                e.contains("FailedPrecondition") && e.contains("0-dimensional"),
                "{e}"
            );
            continue;
        }
        let want = local.read(..).to(&HOST).unwrap();
        let got = client
            .read(name, .., &HOST)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got.shape(), want.shape(), "{name}");
        assert_eq!(got.dtype(), want.dtype(), "{name}");
        assert_eq!(bytes_of(&got), bytes_of(&want), "{name}");
        read += 1;
        if local.metadata().order == devbuf::zarr::Order::F {
            f_order += 1;
        }
    }
    assert!(
        read > 60 && f_order >= 10,
        "{read} arrays, {f_order} in F order"
    );
}

#[test]
fn fixture_selections_match_local_reads() {
    let server = serve(std::path::Path::new(FIXTURES), |c| c.endpoints = 2);
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    let local = ZarrArray::open(format!("{FIXTURES}/v2_float64_F.zarr")).unwrap(); // 10 x 7
    let sels: Vec<Vec<AxisSel>> = vec![
        vec![AxisSel::from(2..9), AxisSel::from(1..6)],
        vec![AxisSel::Index(-1)],
        vec![Slice::new(None, None, 3).into(), AxisSel::Index(4)],
        vec![
            Slice::new(Some(1), Some(-1), 2).into(),
            Slice::new(None, None, 2).into(),
        ],
        vec![AxisSel::from(3..3)],
        vec![],
    ];
    for sel in &sels {
        let want = local.read(sel).to(&HOST).unwrap();
        let got = client.read("v2_float64_F.zarr", sel, &HOST).unwrap();
        assert_eq!(got.shape(), want.shape(), "{sel:?}");
        assert_eq!(bytes_of(&got), bytes_of(&want), "{sel:?}");
    }
    let e = client
        .read("v2_float64_F.zarr", [AxisSel::from(0..11)], &HOST)
        .unwrap_err()
        .to_string();
    assert!(e.contains("out of bounds") && e.contains("size 10"), "{e}");
}

/// The server reads with the engine options it was given (every tuning knob), and
/// options out of range are refused before it starts, naming the field.
#[test]
fn server_read_options_reach_the_engine_and_are_checked() {
    use devbuf::zarr::{GpuTuning, ReadOptions};
    let options = ReadOptions {
        threads: Some(2),
        stream_min_bytes: 0,
        stream_piece_bytes: 64,
        prefault: false,
        ..ReadOptions::default()
    };
    let server = serve(std::path::Path::new(FIXTURES), |c| c.read_options = options);
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    for name in ["v2_float64_F.zarr", "v3_float32_sharded.zarr"] {
        let want = ZarrArray::open(format!("{FIXTURES}/{name}"))
            .unwrap()
            .read(..)
            .to(&HOST)
            .unwrap();
        let got = client.read(name, .., &HOST).unwrap();
        assert_eq!(bytes_of(&got), bytes_of(&want), "{name}");
    }
    let mut bad = config(std::path::Path::new(FIXTURES));
    bad.read_options = ReadOptions {
        gpu: GpuTuning {
            ramp: Some(9),
            ..GpuTuning::default()
        },
        ..ReadOptions::default()
    };
    let e = Server::start(bad, "127.0.0.1:0").unwrap_err().to_string();
    assert!(
        e.contains("ServerConfig::read_options") && e.contains("gpu.ramp is 9; valid: 0 to 8"),
        "{e}"
    );
}

/// A random selection of one axis of length `n` (never empty when `n > 0`).
fn random_axis(rng: &mut SmallRng, n: usize) -> AxisSel {
    match rng.random_range(0..4) {
        0 => AxisSel::Index(rng.random_range(0..n) as isize),
        1 => {
            let a = rng.random_range(0..n);
            let b = rng.random_range(a + 1..=n);
            AxisSel::from(a..b)
        }
        2 => Slice::new(
            Some(rng.random_range(0..n) as isize),
            None,
            rng.random_range(1..4i64) as isize,
        )
        .into(),
        _ => AxisSel::Full,
    }
}

#[test]
fn random_arrays_and_selections_match_local_reads() {
    let mut rng = random::rng("random_arrays_and_selections_match_local_reads");
    let dir = TempDir::new("flight-random");
    let dtypes = [
        Dtype::FLOAT32,
        Dtype::INT16,
        Dtype::UINT8,
        Dtype::FLOAT64,
        Dtype::new(ElementType::Int64, devbuf::zarr::Endianness::Big),
        Dtype::new(ElementType::Bool, devbuf::zarr::Endianness::Little),
        Dtype::new(ElementType::Complex64, devbuf::zarr::Endianness::Little),
    ];
    let compressors = [
        Compressor::None,
        Compressor::Zstd { level: 1 },
        Compressor::Gzip { level: 1 },
    ];
    let mut made = Vec::new();
    for (k, &dtype) in dtypes.iter().enumerate() {
        let nd = rng.random_range(1..=3);
        let shape: Vec<u64> = (0..nd).map(|_| rng.random_range(1..24)).collect();
        let chunks: Vec<u64> = shape
            .iter()
            .map(|&s| rng.random_range(1..=s.min(9)))
            .collect();
        let n: usize = shape.iter().product::<u64>() as usize;
        let values = arrays::random_values(&mut rng, n, devbuf::zarr::Dtype::from(dtype.element()));
        let fill = match dtype.element() {
            ElementType::Bool => Scalar::Bool(true),
            ElementType::Complex64 => Scalar::from(0i32),
            _ => Scalar::from(rng.random_range(-5i32..100)),
        };
        let name = format!("g{}/a{k}.zarr", k % 2);
        let skip_seed: u64 = rng.random();
        let a = random_array(
            &dir.join(&name),
            &shape,
            &chunks,
            dtype,
            fill,
            compressors[k % compressors.len()],
            values,
            // About a quarter of the chunks stay missing (read as the fill value).
            move |idx| {
                idx.iter()
                    .fold(skip_seed, |h, &i| h.wrapping_mul(31).wrapping_add(i))
                    % 4
                    == 0
            },
        );
        made.push((name, a, shape));
    }
    let server = serve(&dir.0, |c| {
        c.endpoints = 3;
        c.batch_bytes = 64;
    });
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    for (name, local, shape) in &made {
        let whole = client.read(name, .., &HOST).unwrap();
        assert_eq!(
            bytes_of(&whole),
            bytes_of(&local.read(..).to(&HOST).unwrap()),
            "{name}"
        );
        for _ in 0..12 {
            let sel: Vec<AxisSel> = shape
                .iter()
                .map(|&n| random_axis(&mut rng, n as usize))
                .collect();
            let want = local.read(&sel).to(&HOST).unwrap();
            let got = client
                .read(name, &sel, &HOST)
                .unwrap_or_else(|e| panic!("{name} {sel:?}: {e}"));
            assert_eq!(got.shape(), want.shape(), "{name} {sel:?}");
            assert_eq!(bytes_of(&got), bytes_of(&want), "{name} {sel:?}");
        }
    }
}

#[test]
fn chunk_batches_arrive_whole_and_padded_with_the_fill_value() {
    let server = serve(std::path::Path::new(FIXTURES), |c| {
        c.endpoints = 4;
        c.batch_bytes = 100;
    });
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    let name = "v3_int16.zarr"; // chunk (1, 1) is missing: fill value -7
    let local = ZarrArray::open(format!("{FIXTURES}/{name}")).unwrap();
    let m = local.metadata().clone();
    let batches = client.read_chunks(name, None, &HOST).unwrap();
    assert!(batches.len() >= 2, "{} batches", batches.len());
    let mut seen = Vec::new();
    for b in &batches {
        assert_eq!(b.tensors().tensor_type().element(), ElementType::Int16);
        for (coords, chunk) in b.iter().map(Result::unwrap) {
            let want = local
                .read_chunks(&[coords])
                .to(&HOST)
                .map(|mut v| v.remove(0))
                .unwrap();
            assert_eq!(bytes_of(&chunk), bytes_of(&want), "chunk {coords:?}");
            seen.push(coords.to_vec());
        }
    }
    seen.sort();
    assert_eq!(seen, zarrs_common::grid_indices(&m.grid_shape));
    // Padded edge chunks hold the fill value beyond the array.
    let (i, b) = batches
        .iter()
        .flat_map(|b| (0..b.len()).map(move |i| (i, b)))
        .find(|(i, b)| b.chunk(*i).unwrap().shape() != b.chunk_shape())
        .expect("an edge chunk");
    let padded: Vec<i16> = b
        .tensors()
        .tensor(i)
        .unwrap()
        .to_ndarray::<i16>()
        .unwrap()
        .iter()
        .copied()
        .collect();
    let cut = b.chunk(i).unwrap().shape().to_vec();
    let full = b.chunk_shape().to_vec();
    let mut pads = 0;
    for (lin, v) in padded.iter().enumerate() {
        let (r, c) = (lin / full[1], lin % full[1]);
        if r >= cut[0] || c >= cut[1] {
            assert_eq!(*v, -7, "padding at {r},{c}");
            pads += 1;
        }
    }
    assert!(pads > 0);
    // A selection's chunks only.
    let sel: Vec<Range<u64>> = vec![5..6, 0..2];
    let part = client.read_chunks(name, Some(&sel), &HOST).unwrap();
    let coords: Vec<Vec<u64>> = part
        .iter()
        .flat_map(|b| (0..b.len()).map(move |i| b.coords(i).unwrap().to_vec()))
        .collect();
    assert_eq!(coords, vec![vec![1u64, 0]]);
}

#[test]
fn flight_info_lists_arrays_and_batches_with_several_endpoints() {
    let server = serve(std::path::Path::new(FIXTURES), |c| c.endpoints = 5);
    let b = RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![1, 2, 3])) as _)])
        .unwrap();
    server
        .register("scores", [b.clone(), b.clone(), b])
        .unwrap();
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    let all = client.list("").unwrap();
    let arrays = all
        .iter()
        .filter(|f| matches!(f.target, Some(Target::Array(_))))
        .count();
    assert!(arrays > 60, "{arrays}");
    assert!(
        all.iter()
            .any(|f| f.target == Some(Target::Batch("scores".into())))
    );
    let only = client.list("v3_float32_").unwrap();
    assert!(
        !only.is_empty()
            && only.iter().all(
                |f| matches!(&f.target, Some(Target::Array(p)) if p.starts_with("v3_float32_"))
            )
    );

    // 10 x 7 in 4 x 3 chunks: 3 x 3 = 9 chunks, 5 endpoints of contiguous ranges.
    let f = client
        .info(&Query::whole(Target::array("v3_float32.zarr").unwrap()))
        .unwrap();
    assert_eq!(f.total_records, 9);
    assert_eq!(f.endpoints.len(), 5);
    let mut next = 0;
    for ep in &f.endpoints {
        let Ok(Part::Chunks { range, region, .. }) = Part::decode(&ep.ticket) else {
            panic!("{ep:?}")
        };
        assert_eq!(region.len(), 9);
        assert_eq!(range.start, next);
        next = range.end;
        assert!(ep.locations.is_empty());
    }
    assert_eq!(next, 9);
    let field = f.schema.field_with_name(CHUNK_COLUMN).unwrap();
    assert_eq!(field.extension_type_name(), Some(FIXED_SHAPE_TENSOR));
    // arrow-rs reads the extension type as its own FixedShapeTensor.
    let t: arrow_schema::extension::FixedShapeTensor = field.try_extension_type().unwrap();
    assert_eq!(t.dimensions(), 2);

    let q = Query {
        target: Target::array("v3_float32.zarr").unwrap(),
        selection: Some(vec![4..8, 3..6]),
        endpoints: Some(2),
    };
    let f = client.info(&q).unwrap();
    assert_eq!((f.total_records, f.endpoints.len()), (1, 1));
    let b = client
        .info(&Query::whole(Target::batch("scores").unwrap()))
        .unwrap();
    assert_eq!((b.total_records, b.endpoints.len()), (9, 3));
}

#[test]
fn registered_and_uploaded_batches_round_trip() {
    let dir = TempDir::new("flight-batches");
    let server = serve(&dir.0, |c| c.endpoints = 2);
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    let mixed: Vec<RecordBatch> = (0..3)
        .map(|s| batches::mixed_batch(s, 50 + s as usize))
        .collect();
    server.register("mixed", mixed.clone()).unwrap();
    let got = client.read_batches("mixed", &HOST).unwrap();
    let got: Vec<RecordBatch> = got.iter().map(|b| b.to_host().unwrap()).collect();
    assert_eq!(got, mixed);
    assert!(server.register("mixed", mixed.clone()).is_err());

    // Upload (dictionary columns included), read back, refuse a second upload.
    client.put("up", mixed.clone()).unwrap();
    assert!(server.registered().contains(&"up".to_string()));
    let back: Vec<RecordBatch> = client
        .read_batches("up", &HOST)
        .unwrap()
        .iter()
        .map(|b| b.to_host().unwrap())
        .collect();
    assert_eq!(back, mixed);
    let e = client
        .put("up", [mixed[0].clone()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("AlreadyExists"), "{e}");
    client.remove("up").unwrap();
    let err = client.read_batches("up", &HOST).unwrap_err();
    let e = err.to_string();
    assert!(e.contains("NotFound"), "{e}");
    // gRPC NOT_FOUND: ErrorKind::NotFound, with the status as source.
    assert_eq!(err.kind(), devbuf::ErrorKind::NotFound, "{err:?}");
    let status = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<devbuf::flight::tonic::Status>())
        .expect("the status is the source");
    assert_eq!(status.code(), devbuf::flight::tonic::Code::NotFound);
    let err = client.remove("up").unwrap_err();
    assert!(err.to_string().contains("NotFound"), "{err}");
    assert_eq!(err.kind(), devbuf::ErrorKind::NotFound, "{err:?}");
    assert!(server.stats().registered_bytes > 0);
    assert!(server.unregister("mixed"));
    assert_eq!(server.stats().registered_bytes, 0);
}

#[test]
fn uploads_are_bounded() {
    let dir = TempDir::new("flight-bound");
    let server = serve(&dir.0, |c| c.max_upload_bytes = 64 << 10);
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    let big = RecordBatch::try_from_iter([(
        "v",
        Arc::new(Float32Array::from(vec![1.5f32; 100_000])) as _,
    )])
    .unwrap();
    let e = client.put("big", [big]).unwrap_err().to_string();
    assert!(
        e.contains("ResourceExhausted") && e.contains("65536"),
        "{e}"
    );
    assert!(server.registered().is_empty());
    let small =
        RecordBatch::try_from_iter([("v", Arc::new(Float32Array::from(vec![1.5f32; 100])) as _)])
            .unwrap();
    client.put("small", [small.clone()]).unwrap();
    assert_eq!(
        client.read_batches("small", &HOST).unwrap()[0]
            .to_host()
            .unwrap(),
        small
    );
}

#[test]
fn two_servers_each_serve_half_of_an_array() {
    // Each server holds the metadata and only its half of the chunks (in C order); a
    // chunk a server lacks would read as the fill value there, so the result is right
    // only when the client fetches each half from the server that has it.
    let mut rng = random::rng("two_servers_each_serve_half_of_an_array");
    let full = TempDir::new("flight-full");
    let shape = [40u64, 30];
    let chunks = [8u64, 7];
    let values = arrays::random_values(&mut rng, 1200, Dtype::FLOAT32);
    let local = random_array(
        &full.join("a.zarr"),
        &shape,
        &chunks,
        Dtype::FLOAT32,
        Scalar::from(-1.0f32),
        Compressor::Zstd { level: 1 },
        values,
        |_| false,
    );
    let grid = local.metadata().grid_shape.clone(); // 5 x 5 = 25 chunks
    let n: u64 = grid.iter().product();
    let halves = [TempDir::new("flight-half-a"), TempDir::new("flight-half-b")];
    for (h, dir) in halves.iter().enumerate() {
        let dst = dir.join("a.zarr");
        std::fs::create_dir_all(&dst).unwrap();
        std::fs::copy(full.join("a.zarr/zarr.json"), dst.join("zarr.json")).unwrap();
        for (lin, idx) in zarrs_common::grid_indices(&grid).iter().enumerate() {
            // Endpoint i of 2 covers chunks [i * n / 2, (i + 1) * n / 2).
            let mine = if h == 0 {
                (lin as u64) < n / 2
            } else {
                (lin as u64) >= n / 2
            };
            if !mine {
                continue;
            }
            let key = format!("c/{}/{}", idx[0], idx[1]);
            let src = full.join("a.zarr").join(&key);
            let to = dst.join(&key);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(src, to).unwrap();
        }
    }
    let listeners: Vec<std::net::TcpListener> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let uris: Vec<String> = listeners
        .iter()
        .map(|l| format!("grpc://{}", l.local_addr().unwrap()))
        .collect();
    let servers: Vec<Server> = listeners
        .into_iter()
        .zip(&halves)
        .map(|(l, dir)| {
            let mut cfg = config(&dir.0);
            cfg.runtime_threads = 4;
            cfg.endpoints = 2;
            cfg.locations = uris.clone();
            cfg.batch_bytes = 1000;
            Server::start(cfg, l).unwrap()
        })
        .collect();
    let want = bytes_of(&local.read(..).to(&HOST).unwrap());
    for uri in &uris {
        // Either server describes the same flight: half at each.
        let client = Client::connect(uri, &opts()).unwrap();
        let f = client
            .info(&Query::whole(Target::array("a.zarr").unwrap()))
            .unwrap();
        let locs: Vec<&str> = f
            .endpoints
            .iter()
            .map(|e| e.locations[0].as_str())
            .collect();
        assert_eq!(locs, vec![uris[0].as_str(), uris[1].as_str()]);
        let got = client.read("a.zarr", .., &HOST).unwrap();
        assert_eq!(bytes_of(&got), want);
        let sel = [AxisSel::from(5..35), Slice::new(None, None, 2).into()];
        let got = client.read("a.zarr", sel, &HOST).unwrap();
        assert_eq!(
            bytes_of(&got),
            bytes_of(&local.read(sel).to(&HOST).unwrap())
        );
    }
    // Both served: each sent its half.
    for s in &servers {
        assert!(s.stats().streams_started >= 2);
    }
    // Without the other server, a read fails instead of returning fill values.
    let lone = serve(&halves[0].0, |c| c.endpoints = 2);
    let client = Client::connect(&lone.uri(), &opts()).unwrap();
    let got = client.read("a.zarr", .., &HOST).unwrap();
    assert_ne!(
        bytes_of(&got),
        want,
        "a lone half cannot hold the whole array"
    );
}

/// A self-signed certificate for `localhost` and its key (PEM).
fn self_signed() -> (String, String) {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    (c.cert.pem(), c.signing_key.serialize_pem())
}

#[test]
fn tls_round_trip_and_untrusted_certificates_are_refused() {
    let (cert, key) = self_signed();
    let server = serve(std::path::Path::new(FIXTURES), |c| {
        c.tls = Some(Tls {
            cert_pem: cert.clone().into(),
            key_pem: key.clone().into(),
        })
    });
    let port = server.local_addr().port();
    let uri = format!("grpc+tls://localhost:{port}");
    assert!(server.uri().starts_with("grpc+tls://"));
    let mut options = opts();
    options.tls_ca = Some(cert.clone().into());
    let client = Client::connect(&uri, &options).unwrap();
    let got = client.read("v2_int32_C.zarr", .., &HOST).unwrap();
    let want = ZarrArray::open(format!("{FIXTURES}/v2_int32_C.zarr"))
        .unwrap()
        .read(..)
        .to(&HOST)
        .unwrap();
    assert_eq!(bytes_of(&got), bytes_of(&want));
    // Another CA: the handshake fails.
    let (other, _) = self_signed();
    options.tls_ca = Some(other.into());
    let r = Client::connect(&uri, &options).and_then(|c| c.list(""));
    assert!(r.is_err());
    // Plain text to a TLS server fails too.
    let r = Client::connect(&format!("grpc://localhost:{port}"), &opts()).and_then(|c| c.list(""));
    assert!(r.is_err());
}

#[test]
fn the_plain_arrow_flight_client_reads_the_chunk_batches() {
    use devbuf::flight::arrow_flight::FlightClient;
    use futures::TryStreamExt;
    let server = serve(std::path::Path::new(FIXTURES), |c| c.endpoints = 2);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let raw = flight_common::raw_client(&rt, &server.uri());
    let mut fc = FlightClient::new_from_inner(raw);
    fc.add_header("authorization", &flight_common::bearer())
        .unwrap();
    let info = rt
        .block_on(
            fc.get_flight_info(devbuf::flight::arrow_flight::FlightDescriptor::new_path(
                vec!["zarr".into(), "v3_uint16.zarr".into()],
            )),
        )
        .unwrap();
    let mut rows = 0;
    for ep in &info.endpoint {
        let t = ep.ticket.clone().unwrap();
        let batches: Vec<RecordBatch> = rt
            .block_on(async { fc.do_get(t).await.unwrap().try_collect().await })
            .unwrap();
        for b in &batches {
            let f = b.schema().field_with_name(CHUNK_COLUMN).unwrap().clone();
            assert_eq!(f.extension_type_name(), Some(FIXED_SHAPE_TENSOR));
            rows += b.num_rows();
            let cb =
                devbuf::arrow::ChunkBatch::try_from(devbuf::arrow::Batch::Host(b.clone())).unwrap();
            assert_eq!(cb.len(), b.num_rows());
            assert!(b.column(0).null_count() == 0);
        }
    }
    assert_eq!(rows as i64, info.total_records);
}
