//! `tracing` spans and events: with a subscriber installed (a capturing layer here), a
//! read, a write and a Flight call each leave their span with its fields and a closing
//! event with bytes and time; file reads add `debug` events inside the read's span,
//! also from the read's worker threads.
#![cfg(all(feature = "zarr", feature = "flight"))]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use devbuf::flight::Client;
use devbuf::zarr::{ArraySpec, BufferPrototype, Compressor, Dtype, NDBuffer, ReadOptions};
use devbuf::zarr::{AxisSel, ZarrArray};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[path = "common/flight.rs"]
mod flight_common;
#[path = "common/zarrs.rs"]
mod zarrs_common;
use flight_common::{opts, serve};
use zarrs_common::TempDir;

/// A span or event as captured: its name (an event's: its message), its fields as
/// text, and (events) the names of the spans it is in, innermost first.
#[derive(Clone, Debug, Default)]
struct Captured {
    name: String,
    fields: HashMap<String, String>,
    spans: Vec<String>,
}

impl Captured {
    fn field(&self, k: &str) -> &str {
        self.fields.get(k).map_or("", |v| v.as_str())
    }
    fn num(&self, k: &str) -> f64 {
        self.field(k).parse().unwrap_or(f64::NAN)
    }
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<HashMap<u64, Captured>>>,
    closed: Arc<Mutex<Vec<Captured>>>,
    events: Arc<Mutex<Vec<Captured>>>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut c = Captured {
            name: attrs.metadata().name().to_string(),
            ..Captured::default()
        };
        attrs.record(&mut Fields(&mut c.fields));
        self.spans.lock().unwrap().insert(id.into_u64(), c);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(c) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut c.fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut c = Captured::default();
        event.record(&mut Fields(&mut c.fields));
        c.name = c.fields.remove("message").unwrap_or_default();
        if let Some(scope) = ctx.event_scope(event) {
            c.spans = scope.map(|s| s.name().to_string()).collect();
        }
        self.events.lock().unwrap().push(c);
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        if let Some(c) = self.spans.lock().unwrap().remove(&id.into_u64()) {
            self.closed.lock().unwrap().push(c);
        }
    }
}

/// The process's capture (a global subscriber: the engine's worker threads and the
/// Flight server's threads report to it too). Tests tell their records apart by the
/// unique paths in their fields.
fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let c = Capture::default();
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(c.clone()))
            .expect("no other subscriber in this test binary");
        c
    })
}

impl Capture {
    /// Spans (open or closed) named `name` whose `key` field contains `value`.
    fn spans(&self, name: &str, key: &str, value: &str) -> Vec<Captured> {
        let open = self
            .spans
            .lock()
            .unwrap()
            .values()
            .cloned()
            .collect::<Vec<_>>();
        let closed = self.closed.lock().unwrap().clone();
        open.into_iter()
            .chain(closed)
            .filter(|c| c.name == name && c.field(key).contains(value))
            .collect()
    }

    /// Events whose message is `name`, in a span named `span`, whose `key` field
    /// contains `value` (an empty key: any).
    fn events(&self, name: &str, span: &str, key: &str, value: &str) -> Vec<Captured> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.name == name && c.spans.iter().any(|s| s == span))
            .filter(|c| key.is_empty() || c.field(key).contains(value))
            .cloned()
            .collect()
    }
}

/// 64 x 48 int32 in 16 x 16 zstd chunks (12 chunks of 1 KiB decoded).
fn make(path: &std::path::Path) -> ZarrArray {
    let a = ZarrArray::create(
        path,
        &ArraySpec::new(&[64, 48], &[16, 16], Dtype::INT32)
            .with_compressor(Compressor::Zstd { level: 1 }),
    )
    .unwrap();
    let v = ndarray::Array2::from_shape_vec((64, 48), (0..64 * 48).collect::<Vec<i32>>()).unwrap();
    a.write_subset(&[0, 0], &NDBuffer::from_ndarray(v)).unwrap();
    a
}

#[test]
fn a_read_and_a_write_leave_spans_and_events() {
    let cap = capture();
    let dir = TempDir::new("tracing_read_write");
    let path = dir.join("traced_rw.zarr");
    let mut a = make(&path);
    a.set_read_options(ReadOptions {
        threads: Some(3),
        ..ReadOptions::default()
    })
    .unwrap();
    a.read(..).to(&BufferPrototype::Host).unwrap();

    let reads = cap.spans("devbuf.read", "location", "traced_rw.zarr");
    assert_eq!(reads.len(), 1, "{reads:?}");
    let r = &reads[0];
    assert_eq!(r.num("chunks"), 12.0, "{r:?}");
    assert_eq!(r.num("selection_bytes"), (64 * 48 * 4) as f64, "{r:?}");
    assert_eq!(r.field("ran"), "cpu", "{r:?}");
    assert_eq!(r.field("shape"), "[64, 48]", "{r:?}");
    assert!(r.field("codecs").contains("zstd"), "{r:?}");
    assert!(!r.field("dtype").is_empty(), "{r:?}");

    let done = cap.events("read done", "devbuf.read", "", "");
    let done: Vec<_> = done
        .iter()
        .filter(|e| e.num("selection_bytes") == (64 * 48 * 4) as f64)
        .collect();
    assert!(!done.is_empty());
    let d = done[0];
    assert_eq!(d.num("decoded_bytes"), (12 * 1024) as f64, "{d:?}");
    assert_eq!(d.num("cpu_chunks"), 12.0, "{d:?}");
    assert!(
        d.num("gb_per_s") > 0.0 && d.num("elapsed_us") >= 0.0,
        "{d:?}"
    );

    // Every chunk file read is a debug event in the read's span (worker threads too).
    let files = cap.events("read chunk file", "devbuf.read", "path", "traced_rw.zarr");
    assert_eq!(files.len(), 12, "{files:?}");
    assert!(
        files
            .iter()
            .all(|f| f.num("bytes") > 0.0 && f.field("ok") == "true")
    );

    // A write.
    let v = ndarray::Array2::from_shape_vec((2, 3), vec![7i32; 6]).unwrap();
    a.write_subset(&[1, 2], &NDBuffer::from_ndarray(v)).unwrap();
    let writes = cap.spans("devbuf.write", "location", "traced_rw.zarr");
    let w: Vec<_> = writes
        .iter()
        .filter(|w| w.field("call") == "write_subset" && w.field("shape") == "[2, 3]")
        .collect();
    assert_eq!(w.len(), 1, "{writes:?}");
    assert_eq!(w[0].num("bytes"), 24.0);
    assert_eq!(w[0].field("device"), "false");
    let wrote = cap.events("write done", "devbuf.write", "", "");
    assert!(!wrote.is_empty() && wrote.iter().all(|e| e.num("elapsed_us") >= 0.0));
}

#[test]
fn a_flight_read_leaves_client_and_server_spans() {
    let cap = capture();
    let dir = TempDir::new("tracing_flight");
    make(&dir.join("traced_flight.zarr"));
    let server = serve(&dir.join(""), |c| c.endpoints = 2);
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    let got = client
        .read(
            "traced_flight.zarr",
            [AxisSel::from(0usize..32)],
            &BufferPrototype::Host,
        )
        .unwrap();
    assert_eq!(got.shape(), &[32, 48]);

    let calls = cap.spans("devbuf.flight.client", "path", "traced_flight.zarr");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].field("call"), "read");
    assert!(calls[0].field("uri").contains("127.0.0.1:"), "{calls:?}");
    let done = cap.events("call done", "devbuf.flight.client", "", "");
    assert!(
        done.iter().any(|e| e.num("bytes") == (32 * 48 * 4) as f64),
        "{done:?}"
    );
    // Each endpoint's stream: a debug event in the call's span.
    let eps = cap.events("endpoint received", "devbuf.flight.client", "", "");
    assert!(eps.len() >= 2, "{eps:?}");
    assert!(
        eps.iter()
            .all(|e| e.num("messages") >= 2.0 && e.num("bytes") > 0.0)
    );

    // The server's DoGet streams: a span each, naming what the ticket asks for, and
    // its end with messages and bytes.
    let gets = cap.spans("devbuf.flight.do_get", "ticket", "traced_flight.zarr");
    assert!(gets.len() >= 2, "{gets:?}");
    let ended = cap.events("stream ended", "devbuf.flight.do_get", "end", "Completed");
    assert!(
        ended.iter().filter(|e| e.num("bytes") > 0.0).count() >= 2,
        "{ended:?}"
    );
    drop(server);
}
