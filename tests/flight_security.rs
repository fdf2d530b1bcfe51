//! Flight security on the host: every call without a valid bearer token is
//! `Unauthenticated`; the handshake issues tokens for Basic credentials; token files;
//! malformed, oversized and random tickets, descriptors and uploads get clear statuses
//! (never `Internal`, never a panic: the server keeps serving); paths with `..`,
//! absolute paths and symbolic links out of the root are refused, and statuses do not
//! reveal where the root is.
#![cfg(feature = "flight")]

use std::path::Path;
use std::sync::Arc;

use arrow_array::{Int32Array, RecordBatch};
use devbuf::__test::flight::ticket::{ChunkRegion, Part};
use devbuf::flight::arrow_flight::flight_service_client::FlightServiceClient;
use devbuf::flight::arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, HandshakeRequest, Ticket,
};
use devbuf::flight::tonic::transport::Channel;
use devbuf::flight::tonic::{Code, Status};
use devbuf::flight::{
    Client, ClientOptions, Server, ServerConfig, generate_token, read_token_file,
};
use devbuf::zarr::BufferPrototype;
use futures::StreamExt;
use rand::Rng;

#[path = "common/flight.rs"]
mod flight_common;
#[path = "common/random.rs"]
mod random;
#[path = "common/zarrs.rs"]
mod zarrs_common;

use flight_common::{TOKEN, bearer, opts, raw_client, serve, with_auth, with_token};
use zarrs_common::TempDir;

const FIXTURES: &str = "tests/fixtures/zarr";
const HOST: BufferPrototype = BufferPrototype::Host;

/// Calls every Flight method with `auth` and returns their statuses (`None`: it
/// succeeded).
fn call_all(
    rt: &tokio::runtime::Runtime,
    c: &mut FlightServiceClient<Channel>,
    auth: Option<&str>,
    ticket: &Ticket,
) -> Vec<(&'static str, Option<Status>)> {
    let desc = || FlightDescriptor::new_path(vec!["zarr".into(), "v3_float32.zarr".into()]);
    rt.block_on(async {
        let mut out = Vec::new();
        let put_stream =
            futures::stream::iter(vec![FlightData::new().with_descriptor(
                FlightDescriptor::new_path(vec!["batch".into(), "x".into()]),
            )]);
        out.push((
            "ListFlights",
            c.list_flights(with_auth(Criteria::default(), auth))
                .await
                .err(),
        ));
        out.push((
            "GetFlightInfo",
            c.get_flight_info(with_auth(desc(), auth)).await.err(),
        ));
        out.push((
            "PollFlightInfo",
            c.poll_flight_info(with_auth(desc(), auth)).await.err(),
        ));
        out.push((
            "GetSchema",
            c.get_schema(with_auth(desc(), auth)).await.err(),
        ));
        out.push((
            "DoGet",
            c.do_get(with_auth(ticket.clone(), auth)).await.err(),
        ));
        out.push(("DoPut", c.do_put(with_auth(put_stream, auth)).await.err()));
        let ex = futures::stream::iter(vec![FlightData::new()]);
        out.push(("DoExchange", c.do_exchange(with_auth(ex, auth)).await.err()));
        let act = Action::new("remove", "x");
        out.push(("DoAction", c.do_action(with_auth(act, auth)).await.err()));
        out.push((
            "ListActions",
            c.list_actions(with_auth(Empty {}, auth)).await.err(),
        ));
        let hs = futures::stream::iter(vec![HandshakeRequest::default()]);
        out.push(("Handshake", c.handshake(with_auth(hs, auth)).await.err()));
        out
    })
}

#[test]
fn every_call_without_a_valid_token_is_unauthenticated() {
    let server = serve(Path::new(FIXTURES), |_| {});
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = raw_client(&rt, &server.uri());
    // A real ticket, obtained with the token.
    let info = rt
        .block_on(c.get_flight_info(with_auth(
            FlightDescriptor::new_path(vec!["zarr".into(), "v3_float32.zarr".into()]),
            Some(&bearer()),
        )))
        .unwrap()
        .into_inner();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    assert_eq!(server.stats().streams_started, 0);
    let wrong = format!("Bearer {TOKEN}x");
    let basic = "Basic dXNlcjpwYXNz".to_string();
    for auth in [
        None,
        Some(wrong.as_str()),
        Some("Token abc"),
        Some("Bearer"),
        Some(basic.as_str()),
    ] {
        for (call, status) in call_all(&rt, &mut c, auth, &ticket) {
            let s = status.unwrap_or_else(|| panic!("{call} with {auth:?} succeeded"));
            assert_eq!(
                s.code(),
                Code::Unauthenticated,
                "{call} with {auth:?}: {s:?}"
            );
            assert!(!s.message().is_empty());
        }
    }
    assert_eq!(
        server.stats().streams_started,
        0,
        "no stream started without a token"
    );
    // With the token the same calls pass authentication (some fail for other reasons).
    let b = bearer();
    for (call, status) in call_all(&rt, &mut c, Some(&b), &ticket) {
        if let Some(s) = status {
            assert_ne!(s.code(), Code::Unauthenticated, "{call}: {s:?}");
        }
    }
    // devbuf's client: the error names the status.
    let bad = Client::connect(&server.uri(), &with_token("nope")).unwrap();
    let err = bad.read("v3_float32.zarr", .., &HOST).unwrap_err();
    // UNAUTHENTICATED: permission denied, whatever the message says.
    assert_eq!(err.kind(), devbuf::ErrorKind::PermissionDenied, "{err:?}");
    let e = err.to_string();
    assert!(
        e.contains("Unauthenticated") && e.contains("invalid bearer token"),
        "{e}"
    );
    let none = Client::connect(&server.uri(), &ClientOptions::default()).unwrap();
    let e = none.list("").unwrap_err().to_string();
    assert!(
        e.contains("Unauthenticated") && e.contains("no authorization header"),
        "{e}"
    );
}

#[test]
fn the_handshake_issues_tokens_and_token_files_work() {
    let dir = TempDir::new("flight-auth");
    let token_path = dir.join("token");
    let secret = generate_token().unwrap();
    std::fs::write(&token_path, format!("{secret}\n")).unwrap();
    let mut cfg = ServerConfig::default();
    cfg.root = Some(FIXTURES.into());
    cfg.tokens.push(read_token_file(&token_path).unwrap());
    cfg.basic_auth = Some(("alice".into(), "correct horse".into()));
    let server = Server::start(cfg, "127.0.0.1:0").unwrap();
    // The token file.
    let c = Client::connect(
        &server.uri(),
        &with_token(&read_token_file(&token_path).unwrap()),
    )
    .unwrap();
    assert!(!c.list("").unwrap().is_empty());
    // The handshake.
    let c = Client::connect(&server.uri(), &ClientOptions::default()).unwrap();
    assert!(c.list("").is_err());
    let e = c.handshake("alice", "wrong").unwrap_err().to_string();
    assert!(
        e.contains("Unauthenticated") && e.contains("wrong user name or password"),
        "{e}"
    );
    let issued = c.handshake("alice", "correct horse").unwrap();
    assert_eq!(issued.len(), 64);
    assert_ne!(issued, secret);
    // The client now sends the issued token.
    assert!(!c.list("").unwrap().is_empty());
    let a = c.read("v2_uint8_C.zarr", .., &HOST).unwrap();
    assert!(a.size() > 0);
    // An issued token works on another connection, and a second handshake with it.
    let c2 = Client::connect(&server.uri(), &with_token(&issued)).unwrap();
    assert!(!c2.list("").unwrap().is_empty());
    // A server needs some way in; a bad token file is an error naming the file.
    let mut tokenless = ServerConfig::default();
    tokenless.root = Some(FIXTURES.into());
    let e = Server::start(tokenless, "127.0.0.1:0").unwrap_err();
    assert!(e.to_string().contains("needs a token"), "{e}");
    std::fs::write(&token_path, "two words").unwrap();
    let e = read_token_file(&token_path).unwrap_err();
    assert!(e.to_string().contains("token file"), "{e}");
    let with = |f: fn(&mut ServerConfig)| {
        let mut c = ServerConfig::default();
        c.tokens.push(TOKEN.into());
        f(&mut c);
        c
    };
    for bad in [
        with(|c| c.endpoints = 0),
        with(|c| c.batch_bytes = 0),
        with(|c| c.queue_depth = 1000),
        with(|c| c.locations = vec!["ftp://x".into()]),
        with(|c| c.tokens = vec!["has space".into()]),
    ] {
        let e = Server::start(bad, "127.0.0.1:0").unwrap_err().to_string();
        assert!(
            e.contains("valid") || e.contains("scheme") || e.contains("token"),
            "{e}"
        );
    }
    let mut zero = ClientOptions::default();
    zero.concurrency = 0;
    let e = Client::connect(&server.uri(), &zero).unwrap_err();
    assert!(e.to_string().contains("1 to 1024"), "{e}");
    let e = Client::connect("localhost:1", &ClientOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no scheme"), "{e}");
}

/// The status of a DoGet of `ticket` (with the token).
fn do_get_status(
    rt: &tokio::runtime::Runtime,
    c: &mut FlightServiceClient<Channel>,
    ticket: Vec<u8>,
) -> Result<usize, Status> {
    rt.block_on(async {
        let mut s = c
            .do_get(with_auth(Ticket::new(ticket), Some(&bearer())))
            .await?
            .into_inner();
        let mut n = 0;
        while let Some(m) = s.next().await {
            m?;
            n += 1;
        }
        Ok(n)
    })
}

#[test]
fn malformed_and_random_tickets_get_clear_statuses() {
    let server = serve(Path::new(FIXTURES), |_| {});
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = raw_client(&rt, &server.uri());
    let cases: Vec<(Vec<u8>, Code, &str)> = vec![
        (vec![], Code::InvalidArgument, "JSON"),
        (b"hello".to_vec(), Code::InvalidArgument, "JSON"),
        (vec![b'{'; 5000], Code::InvalidArgument, "at most 4096"),
        (br#"{"v":1}"#.to_vec(), Code::InvalidArgument, "range"),
        (
            br#"{"v":1,"batch":"nope","range":[0,1]}"#.to_vec(),
            Code::NotFound,
            "no batch",
        ),
        (
            br#"{"v":1,"array":"../x","start":[0],"end":[1],"range":[0,1]}"#.to_vec(),
            Code::InvalidArgument,
            "not allowed",
        ),
        (
            br#"{"v":1,"array":"/etc/passwd","start":[0],"end":[1],"range":[0,1]}"#.to_vec(),
            Code::InvalidArgument,
            "absolute",
        ),
        (
            br#"{"v":1,"array":"nope.zarr","start":[0],"end":[1],"range":[0,1]}"#.to_vec(),
            Code::NotFound,
            "no array",
        ),
        (
            br#"{"v":1,"array":"v3_float32.zarr","start":[0,0],"end":[9,9],"range":[0,1]}"#
                .to_vec(),
            Code::InvalidArgument,
            "chunk grid",
        ),
        (
            br#"{"v":1,"array":"v3_float32.zarr","start":[0],"end":[3],"range":[0,1]}"#.to_vec(),
            Code::InvalidArgument,
            "chunk grid",
        ),
        (
            br#"{"v":1,"array":"v3_float32.zarr","start":[0,0],"end":[3,3],"range":[0,10]}"#
                .to_vec(),
            Code::InvalidArgument,
            "exceeds the region",
        ),
        (
            br#"{"v":1,"array":"v3_int32_0d.zarr","start":[],"end":[],"range":[0,1]}"#.to_vec(),
            Code::FailedPrecondition,
            "0-dimensional",
        ),
    ];
    for (t, code, needle) in cases {
        let s = do_get_status(&rt, &mut c, t.clone()).unwrap_err();
        assert_eq!(s.code(), code, "{:?}: {s:?}", String::from_utf8_lossy(&t));
        assert!(
            s.message().contains(needle),
            "{:?}: {}",
            String::from_utf8_lossy(&t),
            s.message()
        );
    }
    // A forged but valid ticket works: the grid's first two chunks.
    let good = Part::Chunks {
        array: "v3_float32.zarr".into(),
        region: ChunkRegion::new(vec![0, 0], vec![3, 3]).unwrap(),
        range: 0..2,
    };
    assert_eq!(do_get_status(&rt, &mut c, good.encode()).unwrap(), 2);

    // Random bytes and random mutations of a good ticket: always a clear refusal or a
    // valid stream, never Internal or Unknown.
    let mut rng = random::rng("malformed_and_random_tickets_get_clear_statuses");
    let base = good.encode();
    for i in 0..600 {
        let t = if i % 2 == 0 {
            let n = rng.random_range(0..64);
            (0..n).map(|_| rng.random::<u8>()).collect()
        } else {
            let mut t = base.clone();
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..t.len());
                match rng.random_range(0..3) {
                    0 => t[at] = rng.random(),
                    1 => {
                        t.remove(at);
                    }
                    _ => t.insert(at, b"0123456789,[]{}\":-.e"[rng.random_range(0..20)]),
                }
            }
            t
        };
        match do_get_status(&rt, &mut c, t.clone()) {
            Ok(_) => {}
            Err(s) => assert!(
                matches!(
                    s.code(),
                    Code::InvalidArgument | Code::NotFound | Code::FailedPrecondition
                ),
                "{:?}: {s:?}",
                String::from_utf8_lossy(&t)
            ),
        }
    }
    // Random descriptors.
    for _ in 0..300 {
        let d = if rng.random_bool(0.5) {
            let n = rng.random_range(0..5);
            FlightDescriptor::new_path(
                (0..n)
                    .map(|_| {
                        [
                            "zarr",
                            "batch",
                            "..",
                            "",
                            "v3_float32.zarr",
                            "a/b",
                            "\u{0}",
                            "x",
                        ][rng.random_range(0..8)]
                        .to_string()
                    })
                    .collect(),
            )
        } else {
            let n = rng.random_range(0..40);
            FlightDescriptor::new_cmd((0..n).map(|_| rng.random::<u8>()).collect::<Vec<u8>>())
        };
        let r = rt.block_on(c.get_flight_info(with_auth(d.clone(), Some(&bearer()))));
        if let Err(s) = r {
            assert!(
                matches!(s.code(), Code::InvalidArgument | Code::NotFound),
                "{d:?}: {s:?}"
            );
        }
    }
    // Still serving.
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    assert!(client.read("v3_float32.zarr", .., &HOST).is_ok());
    assert!(server.wait_idle(std::time::Duration::from_secs(30)));
}

#[cfg(unix)]
#[test]
fn paths_outside_the_root_are_refused_and_the_root_stays_hidden() {
    let outside = TempDir::new("flight-outside");
    let root = TempDir::new("flight-root");
    let copy = |from: &str, to: &Path| {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(format!("{FIXTURES}/{from}"))
            .unwrap()
            .flatten()
        {
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    };
    copy("v2_int16_C.zarr", &outside.join("secret.zarr"));
    copy("v2_int16_C.zarr", &root.join("inside.zarr"));
    std::fs::create_dir_all(root.join("group")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.zarr"), root.join("group/escape.zarr"))
        .unwrap();
    std::os::unix::fs::symlink(&outside.0, root.join("out")).unwrap();
    std::os::unix::fs::symlink(root.join("inside.zarr"), root.join("group/alias.zarr")).unwrap();
    std::fs::write(root.join("file.zarr"), b"not a directory").unwrap();
    std::fs::create_dir_all(root.join("empty.zarr")).unwrap();

    let server = serve(&root.0, |_| {});
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    assert!(client.read("inside.zarr", .., &HOST).is_ok());
    assert!(
        client.read("group/alias.zarr", .., &HOST).is_ok(),
        "a link inside the root"
    );
    let listed: Vec<String> = client
        .list("")
        .unwrap()
        .into_iter()
        .filter_map(|f| match f.target {
            Some(devbuf::flight::Target::Array(p)) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(
        listed,
        vec!["inside.zarr".to_string()],
        "links are not followed by listings"
    );
    let root_text = std::fs::canonicalize(&root.0)
        .unwrap()
        .display()
        .to_string();
    for (path, code) in [
        ("group/escape.zarr", "PermissionDenied"),
        ("out/secret.zarr", "PermissionDenied"),
        // Refused by the client already (the server refuses them too, below).
        ("../flight-outside/secret.zarr", "not allowed"),
        ("group/../../secret.zarr", "not allowed"),
        ("./inside.zarr", "not allowed"),
        ("file.zarr", "NotFound"),
        ("empty.zarr", "NotFound"),
        ("missing.zarr", "NotFound"),
        ("group", "NotFound"),
    ] {
        let e = client.read(path, .., &HOST).unwrap_err().to_string();
        assert!(e.contains(code), "{path}: {e}");
        assert!(
            !e.contains(&root_text),
            "{path}: the message shows the root: {e}"
        );
    }
    // Absolute paths and '..' never reach the server from devbuf's client...
    assert!(
        client
            .read("/etc", .., &HOST)
            .unwrap_err()
            .to_string()
            .contains("absolute")
    );
    // ...and the server refuses them from any client.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = raw_client(&rt, &server.uri());
    for segs in [
        vec!["zarr", "..", "flight-outside", "secret.zarr"],
        vec!["zarr", "/etc"],
        vec!["zarr", "group", "..", "..", "x"],
        vec!["zarr", "inside.zarr\\..\\x"],
    ] {
        let d = FlightDescriptor::new_path(segs.iter().map(|s| s.to_string()).collect());
        let s = rt
            .block_on(c.get_flight_info(with_auth(d, Some(&bearer()))))
            .unwrap_err();
        assert_eq!(s.code(), Code::InvalidArgument, "{segs:?}: {s:?}");
    }
    let d = FlightDescriptor::new_path(vec!["zarr".into(), "group".into(), "escape.zarr".into()]);
    let s = rt
        .block_on(c.get_flight_info(with_auth(d, Some(&bearer()))))
        .unwrap_err();
    assert_eq!(s.code(), Code::PermissionDenied, "{s:?}");
}

#[test]
fn bad_uploads_are_refused_and_store_nothing() {
    let dir = TempDir::new("flight-bad-put");
    let server = serve(&dir.0, |_| {});
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = raw_client(&rt, &server.uri());
    let batch =
        RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1, 2])) as _)]).unwrap();
    let mut good =
        devbuf::flight::arrow_flight::utils::batches_to_flight_data(&batch.schema(), [&batch])
            .unwrap();
    good[0] = good[0]
        .clone()
        .with_descriptor(FlightDescriptor::new_path(vec![
            "batch".into(),
            "ok".into(),
        ]));
    let named = |name: &[&str]| {
        let mut m = good.clone();
        m[0] = m[0].clone().with_descriptor(FlightDescriptor::new_path(
            name.iter().map(|s| s.to_string()).collect(),
        ));
        m
    };
    let mut no_descriptor = good.clone();
    no_descriptor[0].flight_descriptor = None;
    let mut garbage = good.clone();
    garbage[1].data_header = bytes::Bytes::from_static(b"\x01\x02\x03garbage");
    let mut short_body = good.clone();
    short_body[1].data_body = short_body[1].data_body.slice(0..1);
    let batch_first = vec![
        named(&["batch", "b"])[1]
            .clone()
            .with_descriptor(FlightDescriptor::new_path(vec!["batch".into(), "b".into()])),
    ];
    let cases: Vec<(Vec<FlightData>, Code, &str)> = vec![
        (vec![], Code::InvalidArgument, "empty DoPut"),
        (no_descriptor, Code::InvalidArgument, "no descriptor"),
        (
            named(&["zarr", "a.zarr"]),
            Code::InvalidArgument,
            "read-only",
        ),
        (
            named(&["batch", "../x"]),
            Code::InvalidArgument,
            "invalid batch name",
        ),
        (garbage, Code::InvalidArgument, "flatbuffer"),
        (short_body, Code::InvalidArgument, "record batch"),
        (batch_first, Code::InvalidArgument, "schema"),
    ];
    for (msgs, code, needle) in cases {
        let s = rt
            .block_on(async {
                let mut r = c
                    .do_put(with_auth(futures::stream::iter(msgs), Some(&bearer())))
                    .await?
                    .into_inner();
                while let Some(m) = r.next().await {
                    m?;
                }
                Ok::<_, Status>(())
            })
            .unwrap_err();
        assert_eq!(s.code(), code, "{needle}: {s:?}");
        assert!(s.message().contains(needle), "{needle}: {}", s.message());
    }
    assert!(server.registered().is_empty());
    // The good upload goes through.
    rt.block_on(async {
        let mut r = c
            .do_put(with_auth(futures::stream::iter(good), Some(&bearer())))
            .await
            .unwrap()
            .into_inner();
        while let Some(m) = r.next().await {
            m.unwrap();
        }
    });
    assert_eq!(server.registered(), vec!["ok".to_string()]);
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    assert_eq!(
        client.read_batches("ok", &HOST).unwrap()[0]
            .to_host()
            .unwrap(),
        batch
    );
    // Unknown actions and DoExchange say what exists.
    let s = rt
        .block_on(c.do_action(with_auth(Action::new("drop-all", ""), Some(&bearer()))))
        .unwrap_err();
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(s.message().contains("remove"), "{s:?}");
}
