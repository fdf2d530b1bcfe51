//! The device IPC serializer's plan (metadata on the host, buffers copied into place),
//! checked on host buffers: every message reads back to the same batch with the regular
//! reader and with arrow-ipc's own.

#[path = "common/c_device_corpus.rs"]
mod corpus;

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{
    Array, ArrayRef, BooleanArray, DictionaryArray, FixedSizeListArray, Float64Array, Int32Array,
    LargeBinaryArray, NullArray, RecordBatch, StringArray, StructArray, UInt64Array,
    types::Int32Type,
};
use arrow_buffer::Buffer;
use arrow_schema::{DataType, Field, Schema};
use devbuf::__test::serialize_like_device;

fn mixed(n: usize) -> RecordBatch {
    let ints: ArrayRef = Arc::new(Int32Array::from_iter(
        (0..n as i32).map(|i| (i % 3 != 0).then_some(i * 7 - 50)),
    ));
    let floats: ArrayRef = Arc::new(Float64Array::from_iter_values(
        (0..n).map(|i| i as f64 * 0.25 - 3.0),
    ));
    let bools: ArrayRef = Arc::new(BooleanArray::from_iter(
        (0..n).map(|i| (i % 5 != 0).then_some(i % 2 == 0)),
    ));
    let strings: ArrayRef = Arc::new(StringArray::from_iter(
        (0..n).map(|i| (i % 4 != 1).then(|| format!("s{}", i * 13))),
    ));
    let blobs: ArrayRef = Arc::new(LargeBinaryArray::from_iter_values(
        (0..n).map(|i| vec![i as u8; i % 9]),
    ));
    let mut lb = ListBuilder::new(StringBuilder::new());
    for i in 0..n {
        for k in 0..(i % 3) {
            lb.values().append_value(format!("{i}.{k}"));
        }
        lb.append(i % 7 != 3);
    }
    let lists: ArrayRef = Arc::new(lb.finish());
    let structs: ArrayRef = Arc::new(StructArray::from(vec![
        (
            Arc::new(Field::new("a", DataType::UInt64, false)),
            Arc::new(UInt64Array::from_iter_values((0..n as u64).map(|i| i * i))) as ArrayRef,
        ),
        (
            Arc::new(Field::new("b", DataType::Utf8, true)),
            Arc::new(StringArray::from_iter(
                (0..n).map(|i| (i % 2 == 0).then(|| "x".repeat(i % 4))),
            )) as ArrayRef,
        ),
    ]));
    let fsl: ArrayRef = Arc::new(FixedSizeListArray::new(
        Arc::new(Field::new("item", DataType::Float32, false)),
        3,
        Arc::new(arrow_array::Float32Array::from_iter_values(
            (0..3 * n).map(|i| i as f32),
        )),
        None,
    ));
    let nulls: ArrayRef = Arc::new(NullArray::new(n));
    RecordBatch::try_from_iter([
        ("ints", ints),
        ("floats", floats),
        ("bools", bools),
        ("strings", strings),
        ("blobs", blobs),
        ("lists", lists),
        ("structs", structs),
        ("fsl", fsl),
        ("nulls", nulls),
    ])
    .unwrap()
}

#[test]
fn messages_read_back_with_both_readers() {
    for n in [0usize, 1, 7, 64, 1000] {
        let batch = mixed(n);
        let bytes = serialize_like_device(&batch).unwrap();
        assert_eq!(bytes[..4], [0xff; 4], "continuation marker");
        let back = read_host(&Buffer::from(bytes.clone()), batch.schema()).unwrap();
        assert_eq!(back, batch, "devbuf's reader, {n} rows");
        // arrow-ipc's reader: schema message first, then ours.
        let mut stream = Vec::new();
        {
            let mut w =
                arrow_ipc::writer::StreamWriter::try_new(&mut stream, &batch.schema()).unwrap();
            w.flush().unwrap();
        }
        // The writer was not finished: no end-of-stream marker yet.
        assert_ne!(
            stream[stream.len() - 8..],
            [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]
        );
        stream.extend_from_slice(&bytes);
        let mut r =
            arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(stream), None).unwrap();
        assert_eq!(
            r.next().unwrap().unwrap(),
            batch,
            "arrow-ipc's reader, {n} rows"
        );
    }
}

#[test]
fn dictionaries_and_slices_are_refused_with_a_reason() {
    let dict: ArrayRef = Arc::new(DictionaryArray::<Int32Type>::from_iter(["a", "b", "a"]));
    let batch = RecordBatch::try_from_iter([("d", dict)]).unwrap();
    let e = serialize_like_device(&batch).unwrap_err().to_string();
    assert!(e.contains("dictionar") && e.contains("to_host"), "{e}");
    // Host slices are rebased when their parts are taken, so they are written
    // correctly; device arrays with an offset are refused (see the GPU test).
    let sliced = mixed(100).slice(10, 20);
    let bytes = serialize_like_device(&sliced).unwrap();
    assert_eq!(
        read_host(&Buffer::from(bytes), sliced.schema()).unwrap(),
        sliced
    );
    let whole = mixed(5);
    assert!(
        serialize_like_device(&whole)
            .unwrap()
            .len()
            .is_multiple_of(8)
    );
    assert_eq!(whole.column(0).len(), 5);
}

/// Reads one encoded message with arrow-ipc's stream reader (after a schema message).
fn read_with_arrow_ipc(batch: &RecordBatch, message: &[u8]) -> RecordBatch {
    let mut stream = Vec::new();
    {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut stream, &batch.schema()).unwrap();
        w.flush().unwrap();
    }
    stream.extend_from_slice(message);
    let mut r =
        arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(stream), None).unwrap();
    r.next().unwrap().unwrap()
}

/// Whether the device serializer refuses the type (dictionaries, unions, run-end
/// encoded and view types), anywhere in it.
fn refused(dt: &DataType) -> bool {
    match dt {
        DataType::Dictionary(_, _)
        | DataType::Union(_, _)
        | DataType::RunEndEncoded(_, _)
        | DataType::Utf8View
        | DataType::BinaryView
        | DataType::ListView(_)
        | DataType::LargeListView(_) => true,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => refused(f.data_type()),
        DataType::Struct(fs) => fs.iter().any(|f| refused(f.data_type())),
        _ => false,
    }
}

#[test]
fn every_type_of_the_corpus_reads_back_or_is_refused_with_a_reason() {
    let mut written = 0;
    for (name, a) in corpus::all()
        .into_iter()
        .chain(corpus::views().into_iter().map(|(n, a)| (n.to_string(), a)))
    {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "c",
            a.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(schema, vec![a.clone()]).unwrap();
        let result = serialize_like_device(&batch);
        if refused(a.data_type()) {
            let e = result.expect_err(&name).to_string();
            assert!(e.contains("to_host"), "{name}: {e}");
            continue;
        }
        let bytes = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(bytes.len() % 64, 0, "{name}: body and metadata are padded");
        let meta_len = i32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
        assert_eq!(
            (8 + meta_len) % 64,
            0,
            "{name}: the body starts 64-byte aligned"
        );
        let back = read_host(&Buffer::from(bytes.clone()), batch.schema()).unwrap();
        assert_eq!(back, batch, "{name}: devbuf's reader");
        assert_eq!(
            read_with_arrow_ipc(&batch, &bytes),
            batch,
            "{name}: arrow-ipc's reader"
        );
        written += 1;
    }
    assert!(written > 40, "{written} types written");
}

#[test]
fn refusals_name_the_real_reason() {
    let cases: Vec<(&str, ArrayRef, &str)> = corpus::others()
        .into_iter()
        .chain(corpus::views())
        .filter_map(|(name, a)| {
            let why = match a.data_type() {
                DataType::Union(_, _) => "union",
                DataType::RunEndEncoded(_, _) => "run-end",
                DataType::Utf8View | DataType::BinaryView => "variadic",
                DataType::ListView(_) | DataType::LargeListView(_) => "list view",
                DataType::Dictionary(_, _) => "dictionar",
                _ => return None,
            };
            Some((name, a, why))
        })
        .collect();
    assert!(
        cases.len() >= 6,
        "{} refused types in the corpus",
        cases.len()
    );
    for (name, a, why) in cases {
        let batch = RecordBatch::try_from_iter([("c", a)]).unwrap();
        let e = serialize_like_device(&batch).unwrap_err().to_string();
        assert!(e.contains(why) && e.contains("to_host"), "{name}: {e}");
    }
}

#[path = "common/ipc_messages.rs"]
mod ipc_messages;
use ipc_messages::read_host;
