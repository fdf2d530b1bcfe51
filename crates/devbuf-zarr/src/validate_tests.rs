//! Unit tests of `validate.rs`: every bound, field and entry point.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::storage::StoreAdapter;
use devbuf_core::zarr::{ByteBuffer, MemoryStore, Store};

fn v3(shape: Value, chunk: Value, dt: &str) -> Value {
    json!({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": dt,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]
    })
}

fn err3(doc: &Value) -> Error {
    check_document(doc, 3, "x").unwrap_err()
}

#[test]
fn overflowing_and_empty_chunks_are_refused() {
    let e = err3(&v3(
        json!([4, 4, 4]),
        json!([1u64 << 62, 1u64 << 62, 4]),
        "float32",
    ));
    assert!(matches!(e, Error::Malformed(_)), "{e}");
    let m = e.to_string();
    assert!(m.contains("chunk_grid.configuration.chunk_shape"), "{m}");
    assert!(
        m.contains("2^64 bytes or more") && m.contains("MAX_CHUNK_BYTES"),
        "{m}"
    );
    let e = err3(&v3(json!([4, 4, 4]), json!([u64::MAX, 2, 4]), "float32"));
    assert!(matches!(e, Error::Malformed(_)), "{e}");
    // Fits 64 bits but is beyond the bound: unsupported, not malformed.
    let e = err3(&v3(
        json!([4, 4]),
        json!([1u64 << 30, 1u64 << 30]),
        "float64",
    ));
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("9223372036854775808 bytes"), "{e}");
    let e = err3(&v3(json!([4, 4]), json!([2, 0]), "uint8"));
    assert!(e.to_string().contains("axis 1 is 0"), "{e}");
    let e = err3(&v3(json!([4, 4]), json!([2]), "uint8"));
    assert!(e.to_string().contains("has 1 axes, the array has 2"), "{e}");
    // Exactly at the bound: accepted.
    check_document(&v3(json!([1]), json!([MAX_CHUNK_BYTES]), "uint8"), 3, "x").unwrap();
    assert!(
        check_document(
            &v3(json!([1]), json!([MAX_CHUNK_BYTES + 1]), "uint8"),
            3,
            "x"
        )
        .is_err()
    );
}

#[test]
fn array_shapes_must_fit_but_may_be_empty() {
    let e = err3(&v3(json!([u64::MAX, u64::MAX]), json!([1, 1]), "float32"));
    assert!(matches!(e, Error::Malformed(_)), "{e}");
    assert!(e.to_string().contains("field shape"), "{e}");
    // A zero extent empties the array whatever the others.
    check_document(
        &v3(json!([0, u64::MAX / 8]), json!([1, 1]), "float32"),
        3,
        "x",
    )
    .unwrap();
    assert!(
        check_document(
            &v3(json!([0, u64::MAX / 2]), json!([1, 1]), "float32"),
            3,
            "x"
        )
        .is_err()
    );
}

#[test]
fn rank_is_bounded_and_messages_stay_short() {
    let big: Vec<u64> = vec![1; 10_000];
    let e = err3(&v3(json!(big), json!(big), "uint8"));
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("10000 axes") && m.contains("MAX_RANK = 64"),
        "{m}"
    );
    assert!(m.len() < 300, "{m}");
    let ok: Vec<u64> = vec![1; MAX_RANK];
    check_document(&v3(json!(ok), json!(ok), "uint8"), 3, "x").unwrap();
}

#[test]
fn data_types_and_fields_are_named() {
    for dt in ["string", "r16", "bfloat16"] {
        let e = err3(&v3(json!([4]), json!([2]), dt));
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("unsupported data type"), "{e}");
    }
    check_document(&v3(json!([4]), json!([2]), "complex_float64"), 3, "x").unwrap();
    let mut t = v3(json!([4]), json!([2]), "int64");
    t["data_type"] = json!({"name": "numpy.timedelta64",
                            "configuration": {"unit": "s", "scale_factor": 10}});
    check_document(&t, 3, "x").unwrap();
    // Refused codecs are named, also inside a shard.
    let mut q = v3(json!([4]), json!([2]), "float64");
    q["codecs"] = json!([{"name": "numcodecs.quantize", "configuration": {"digits": 3}},
                         {"name": "bytes"}]);
    let e = err3(&q);
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("codecs[0]"), "{e}");
    assert!(e.to_string().contains("\"numcodecs.quantize\""), "{e}");
    q["codecs"] = json!([{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [1], "codecs": [{"name": "bytes"}, {"name": "numcodecs.lzma"}],
        "index_codecs": [{"name": "bytes"}]}}]);
    let e = err3(&q);
    assert!(
        e.to_string().contains("codecs[0].configuration.codecs[1]"),
        "{e}"
    );
    assert!(e.to_string().contains("lzma"), "{e}");
    let e = err3(&v3(json!([4, -1]), json!([2, 2]), "uint8"));
    assert!(e.to_string().contains("field shape axis 1 is -1"), "{e}");
    let e = err3(&v3(json!("[4]"), json!([2]), "uint8"));
    assert!(
        e.to_string().contains("expected an array of integers"),
        "{e}"
    );
    let e = err3(&json!([1, 2]));
    assert!(e.to_string().contains("not a JSON object"), "{e}");
    let mut g = v3(json!([4]), json!([2]), "uint8");
    g["node_type"] = json!("group");
    assert!(err3(&g).to_string().contains("describes a group"));
    let mut r = v3(json!([4]), json!([2]), "uint8");
    r["chunk_grid"]["name"] = json!("rectangular");
    assert!(err3(&r).to_string().contains("regular chunk grids"));
}

#[test]
fn v2_documents() {
    let doc = |dtype: Value, chunks: Value| {
        json!({"zarr_format": 2, "shape": [10, 7], "chunks": chunks, "dtype": dtype,
               "compressor": null, "fill_value": 0.0, "order": "C", "filters": null})
    };
    check_document(&doc(json!("<f8"), json!([4, 3])), 2, "x").unwrap();
    for dt in [
        json!("<U10"),
        json!("|O"),
        json!("|S5"),
        json!("<M8[xx]"),
        json!([["a", "<f4"]]),
    ] {
        let e = check_document(&doc(dt.clone(), json!([4, 3])), 2, "x").unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{dt}: {e}");
        assert!(e.to_string().contains("unsupported data type"), "{e}");
        assert!(e.to_string().contains(".zarray field dtype"), "{e}");
    }
    // numpy datetime64 / timedelta64: 8-byte counts of the unit.
    for dt in ["<M8[ns]", ">m8[10s]", "<M8"] {
        check_document(&doc(json!(dt), json!([4, 3])), 2, "x").unwrap();
    }
    // Refused codecs, named: compressor and filters.
    let mut lzma = doc(json!("<f8"), json!([4, 3]));
    lzma["compressor"] = json!({"id": "lzma", "preset": null});
    let mut delta = doc(json!("<i4"), json!([4, 3]));
    delta["filters"] = json!([{"id": "delta", "dtype": "<i4"}]);
    let mut vlen = doc(json!("|O"), json!([4, 3]));
    vlen["filters"] = json!([{"id": "vlen-utf8"}]);
    for (d, name) in [
        (lzma, "\"lzma\""),
        (delta, "\"delta\""),
        (vlen, "\"vlen-utf8\""),
    ] {
        let e = check_document(&d, 2, "x").unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains(name), "{e}");
        assert!(e.to_string().contains("unsupported"), "{e}");
    }
    let mut zero_d = doc(json!("<f8"), json!([]));
    zero_d["shape"] = json!([]);
    check_document(&zero_d, 2, "x").unwrap();
    zero_d["order"] = json!("F");
    let e = check_document(&zero_d, 2, "x").unwrap_err();
    assert!(e.to_string().contains("zero axes"), "{e}");
    let e = check_document(&doc(json!("<f8"), json!([u64::MAX, 2])), 2, "x").unwrap_err();
    assert!(matches!(e, Error::Malformed(_)), "{e}");
    assert!(e.to_string().contains(".zarray field chunks"), "{e}");
}

#[test]
fn shards_of_many_inner_chunks_are_bounded() {
    let sharded = |shard: Value, inner: Value| {
        let mut d = v3(json!([16, 16]), shard, "float32");
        d["codecs"] = json!([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": inner, "codecs": [{"name": "bytes"}], "index_codecs": [{"name": "bytes"}]}}]);
        d
    };
    // 2^37 bytes in 2^31 inner chunks: zarrs's bound, 2^68, would overflow.
    let e = err3(&sharded(json!([1u64 << 32, 8]), json!([4, 4])));
    assert!(e.to_string().contains("MAX_SHARD_PRODUCT"), "{e}");
    // 1 GiB of 4 KiB inner chunks: fine.
    check_document(&sharded(json!([1 << 14, 1 << 14]), json!([32, 32])), 3, "x").unwrap();
}

#[test]
fn codec_lists_are_bounded() {
    let mut d = v3(json!([4]), json!([2]), "uint8");
    let gzip = json!({"name": "gzip", "configuration": {"level": 1}});
    let mut codecs = vec![json!({"name": "bytes"})];
    codecs.extend(std::iter::repeat_n(gzip.clone(), MAX_CODECS - 1));
    d["codecs"] = json!(codecs);
    check_document(&d, 3, "x").unwrap();
    codecs.push(gzip);
    d["codecs"] = json!(codecs);
    let e = err3(&d);
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(
        e.to_string().contains("has 17 codecs") && e.to_string().contains("MAX_CODECS = 16"),
        "{e}"
    );
}

#[test]
fn shards_must_be_divided_by_their_inner_chunks() {
    let sharded = |inner: Value, nested: Option<Value>| {
        let mut inner_codecs = vec![json!({"name": "bytes"})];
        if let Some(n) = nested {
            inner_codecs.insert(0, json!({"name": "sharding_indexed", "configuration": {"chunk_shape": n, "codecs": [{"name": "bytes"}]}}));
        }
        let mut d = v3(json!([16, 16]), json!([8, 8]), "uint16");
        d["codecs"] = json!([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": inner, "codecs": inner_codecs, "index_codecs": [{"name": "bytes"}]}}]);
        d
    };
    check_document(&sharded(json!([4, 2]), None), 3, "x").unwrap();
    check_document(&sharded(json!([4, 2]), Some(json!([2, 1]))), 3, "x").unwrap();
    let e = err3(&sharded(json!([3, 2]), None));
    assert!(matches!(e, Error::Malformed(_)), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("codecs[0].configuration.chunk_shape") && m.contains("does not divide"),
        "{m}"
    );
    let e = err3(&sharded(json!([4, 2]), Some(json!([3, 1]))));
    assert!(
        e.to_string()
            .contains("codecs[0].configuration.codecs[0].configuration.chunk_shape"),
        "{e}"
    );
    let e = err3(&sharded(json!([4, 0]), None));
    assert!(e.to_string().contains("axis 1 is 0"), "{e}");
    let e = err3(&sharded(json!([4]), None));
    assert!(e.to_string().contains("the array has 2"), "{e}");
}

#[test]
fn preflight_reads_through_the_storage() {
    let store = Arc::new(MemoryStore::new());
    let adapter = StoreAdapter::new(store.clone());
    // No metadata: left to zarrs (which says so).
    preflight(&adapter, "/", "m").unwrap();
    store
        .set("a/zarr.json", &ByteBuffer::from(&b"{not json"[..]))
        .unwrap();
    let e = preflight(&adapter, "/a", "m").unwrap_err();
    assert!(matches!(e, Error::Malformed(_)), "{e}");
    assert!(e.to_string().contains("zarr.json is not valid JSON"), "{e}");
    let doc = v3(json!([4]), json!([2]), "string").to_string();
    store
        .set("a/zarr.json", &ByteBuffer::from(doc.into_bytes()))
        .unwrap();
    let e = preflight(&adapter, "/a", "m").unwrap_err();
    assert!(e.to_string().contains("unsupported data type"), "{e}");
    let doc = json!({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<U10",
                     "compressor": null, "fill_value": 0.0, "order": "C", "filters": null});
    store
        .set("b/.zarray", &ByteBuffer::from(doc.to_string().into_bytes()))
        .unwrap();
    let e = preflight(&adapter, "/b", "m").unwrap_err();
    assert!(
        e.to_string()
            .contains("dtype \"<U10\" is an unsupported data type"),
        "{e}"
    );
}
