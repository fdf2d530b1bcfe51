//! Deterministic Arrow record batches for the IPC tests (host and GPU): every column
//! kind the IPC path covers, with nulls, from a seed.

#![allow(dead_code)]

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, LargeBinaryBuilder,
    LargeStringBuilder, ListBuilder, StringBuilder, StringDictionaryBuilder,
};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, Decimal128Array, FixedSizeBinaryArray, Int16Array, NullArray, RecordBatch,
    StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field};

/// xorshift64*: fast, reproducible, never stuck at zero.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn word(&mut self) -> String {
        let n = self.below(12) as usize;
        (0..n)
            .map(|_| (b'a' + self.below(26) as u8) as char)
            .collect()
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        if n > 0 && v.iter().all(|&b| b == 0) {
            v[0] = 1;
        }
        v
    }
}

/// A batch of `rows` rows with primitive, boolean, utf8/binary (and large), list,
/// struct, dictionary, fixed-size binary, timestamp, decimal and null columns, about
/// a fifth of the values null.
pub fn mixed_batch(seed: u64, rows: usize) -> RecordBatch {
    let mut r = Rng::new(seed);
    let mut i32s = Int32Builder::new();
    let mut f64s = Float64Builder::new();
    let mut bools = BooleanBuilder::new();
    let mut strs = StringBuilder::new();
    let mut lstrs = LargeStringBuilder::new();
    let mut bins = BinaryBuilder::new();
    let mut lbins = LargeBinaryBuilder::new();
    let mut lists = ListBuilder::new(Int64Builder::new());
    let mut dict = StringDictionaryBuilder::<Int32Type>::new();
    let mut fsb = Vec::new();
    let mut ts = Vec::new();
    let mut dec = Vec::new();
    let mut s_a = Vec::new();
    let mut s_b = Vec::new();
    let mut s_valid = Vec::new();
    for _ in 0..rows {
        let null = r.chance(20);
        i32s.append_option((!null).then(|| r.next() as i32));
        f64s.append_value(r.next() as f64 / 7.0);
        bools.append_option((!r.chance(20)).then(|| r.chance(50)));
        strs.append_option((!r.chance(20)).then(|| r.word()));
        lstrs.append_value(r.word());
        let n = r.below(9) as usize;
        bins.append_option((!r.chance(20)).then(|| r.bytes(n)));
        lbins.append_value(r.bytes(n + 1));
        if r.chance(20) {
            lists.append_null();
        } else {
            for _ in 0..r.below(5) {
                lists.values().append_value(r.next() as i64);
            }
            lists.append(true);
        }
        let words = ["red", "green", "blue", "cyan", "magenta"];
        if r.chance(20) {
            dict.append_null();
        } else {
            dict.append_value(words[r.below(5) as usize]);
        }
        fsb.push((!r.chance(20)).then(|| r.bytes(3)));
        ts.push((!r.chance(20)).then(|| r.next() as i64 >> 8));
        dec.push((!r.chance(20)).then(|| r.next() as i128 * 1000));
        s_a.push(r.next() as i16);
        s_b.push(r.word());
        s_valid.push(!r.chance(20));
    }
    let structs = StructArray::try_new(
        vec![
            Field::new("a", DataType::Int16, false),
            Field::new("b", DataType::Utf8, false),
        ]
        .into(),
        vec![
            Arc::new(Int16Array::from(s_a)) as ArrayRef,
            Arc::new(StringArray::from(s_b)) as ArrayRef,
        ],
        Some(s_valid.into()),
    )
    .expect("struct column");
    let fsb = FixedSizeBinaryArray::try_from_sparse_iter_with_size(fsb.into_iter(), 3)
        .expect("fixed size binary column");
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("i32", Arc::new(i32s.finish())),
        ("f64", Arc::new(f64s.finish())),
        ("bool", Arc::new(bools.finish())),
        ("utf8", Arc::new(strs.finish())),
        ("large_utf8", Arc::new(lstrs.finish())),
        ("binary", Arc::new(bins.finish())),
        ("large_binary", Arc::new(lbins.finish())),
        ("list", Arc::new(lists.finish())),
        ("struct", Arc::new(structs)),
        ("dict", Arc::new(dict.finish())),
        ("fsb", Arc::new(fsb)),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
        ),
        (
            "dec",
            Arc::new(
                Decimal128Array::from(dec)
                    .with_precision_and_scale(38, 3)
                    .expect("decimal"),
            ),
        ),
        ("null", Arc::new(NullArray::new(rows))),
    ];
    RecordBatch::try_from_iter(columns).expect("mixed batch")
}
