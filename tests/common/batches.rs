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

/// A batch of the exotic column kinds: views, unions (sparse and dense), run-end
/// encoded, fixed-size list, map, nested dictionaries (in a list and in a struct),
/// dictionaries with int8/int16 keys, an all-null dictionary.
pub fn exotic_batch() -> RecordBatch {
    use arrow_array::builder::{FixedSizeListBuilder, MapBuilder};
    use arrow_array::types::{Int8Type, Int16Type};
    use arrow_array::{
        Array, BinaryViewArray, DictionaryArray, Float32Array, Int32Array, Int64Array, ListArray,
        RunArray, StringViewArray, UnionArray,
    };
    use arrow_buffer::ScalarBuffer;
    use arrow_schema::UnionFields;
    // Views, union (sparse and dense), run-end encoded, fixed-size list, map, nested
    // dictionaries (in a list and in a struct), dictionary with int8/int16 keys.
    let views = StringViewArray::from(vec![
        Some("short"),
        None,
        Some("a string that is longer than twelve bytes"),
        Some(""),
        Some("another long string for the data buffer"),
    ]);
    let bviews = BinaryViewArray::from(vec![
        Some(&b"x"[..]),
        Some(&b"0123456789abcdefghij"[..]),
        None,
        Some(&b""[..]),
        Some(&b"yy"[..]),
    ]);
    let fields = UnionFields::try_new(
        vec![0, 1],
        vec![
            Field::new("i", DataType::Int32, true),
            Field::new("f", DataType::Float32, true),
        ],
    )
    .unwrap();
    let sparse = UnionArray::try_new(
        fields.clone(),
        ScalarBuffer::from(vec![0i8, 1, 0, 1, 1]),
        None,
        vec![
            Arc::new(Int32Array::from(vec![Some(1), None, Some(3), None, None])) as ArrayRef,
            Arc::new(Float32Array::from(vec![
                None,
                Some(2.5),
                None,
                Some(4.5),
                Some(5.5),
            ])),
        ],
    )
    .unwrap();
    let dense = UnionArray::try_new(
        fields,
        ScalarBuffer::from(vec![1i8, 0, 0, 1, 0]),
        Some(ScalarBuffer::from(vec![0i32, 0, 1, 1, 2])),
        vec![
            Arc::new(Int32Array::from(vec![10, 20, 30])) as ArrayRef,
            Arc::new(Float32Array::from(vec![0.5, 1.5])),
        ],
    )
    .unwrap();
    let ree = RunArray::<Int32Type>::try_new(
        &Int32Array::from(vec![2, 4, 5]),
        &StringArray::from(vec![Some("a"), None, Some("c")]),
    )
    .unwrap();
    let mut fsl = FixedSizeListBuilder::new(Int32Builder::new(), 2);
    for i in 0..5 {
        if i == 2 {
            fsl.values().append_null();
            fsl.values().append_null();
            fsl.append(false);
        } else {
            fsl.values().append_value(i);
            fsl.values().append_value(i * 10);
            fsl.append(true);
        }
    }
    let mut map = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    for i in 0..5 {
        for j in 0..i {
            map.keys().append_value(format!("k{j}"));
            map.values().append_value(j);
        }
        map.append(i != 3).unwrap();
    }
    let dict8: DictionaryArray<Int8Type> = vec![Some("x"), None, Some("y"), Some("x"), Some("z")]
        .into_iter()
        .collect();
    let dict16: DictionaryArray<Int16Type> = vec!["p", "q", "p", "p", "r"].into_iter().collect();
    // A list of dictionary values.
    let inner: DictionaryArray<Int32Type> = vec!["u", "v", "u", "w", "v", "u", "w"]
        .into_iter()
        .collect();
    let list_of_dict = ListArray::try_new(
        Arc::new(Field::new("item", inner.data_type().clone(), true)),
        arrow_buffer::OffsetBuffer::new(ScalarBuffer::from(vec![0i32, 2, 2, 4, 5, 7])),
        Arc::new(inner),
        None,
    )
    .unwrap();
    let struct_of_dict = StructArray::try_new(
        vec![
            Field::new(
                "d",
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                true,
            ),
            Field::new("n", DataType::Int64, true),
        ]
        .into(),
        vec![
            Arc::new(
                vec![Some("m"), Some("n"), None, Some("m"), Some("o")]
                    .into_iter()
                    .collect::<DictionaryArray<Int32Type>>(),
            ) as ArrayRef,
            Arc::new(Int64Array::from(vec![1, 2, 3, 4, 5])),
        ],
        None,
    )
    .unwrap();
    // An all-null dictionary column.
    let all_null: DictionaryArray<Int32Type> = vec![None::<&str>; 5].into_iter().collect();
    RecordBatch::try_from_iter(vec![
        ("views", Arc::new(views) as ArrayRef),
        ("bviews", Arc::new(bviews)),
        ("sparse", Arc::new(sparse)),
        ("dense", Arc::new(dense)),
        ("ree", Arc::new(ree)),
        ("fsl", Arc::new(fsl.finish())),
        ("map", Arc::new(map.finish())),
        ("dict8", Arc::new(dict8)),
        ("dict16", Arc::new(dict16)),
        ("list_of_dict", Arc::new(list_of_dict)),
        ("struct_of_dict", Arc::new(struct_of_dict)),
        ("all_null_dict", Arc::new(all_null)),
    ])
    .unwrap()
}
