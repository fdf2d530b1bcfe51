//! Arrays of every type the C Device Data Interface tests cover (host and GPU): each
//! type with nulls, slices at offsets that are not multiples of 8, empty arrays,
//! nested and dictionary types. Deterministic.

#![allow(dead_code)]

use std::sync::Arc;

use arrow_array::builder::{
    FixedSizeListBuilder, Float32Builder, Int32Builder, LargeListBuilder, LargeStringBuilder,
    ListBuilder, MapBuilder, StringBuilder, StringDictionaryBuilder,
};
use arrow_array::types::{Int8Type, Int16Type, Int32Type, UInt64Type};
use arrow_array::*;
use arrow_buffer::{IntervalDayTime, IntervalMonthDayNano, OffsetBuffer, ScalarBuffer, i256};
use arrow_schema::{DataType, Field, UnionFields};

/// Serialises the tests that read the process-wide release counters.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The releases and live exports since `start`.
pub struct Counts {
    released: u64,
    live: i64,
}

/// The counters now, to compare with later.
pub fn counts() -> Counts {
    Counts {
        released: devbuf::arrow::c_device::release_count(),
        live: devbuf::arrow::c_device::live_exports(),
    }
}

impl Counts {
    /// Release callbacks run since [`counts`].
    pub fn released_since(&self) -> u64 {
        devbuf::arrow::c_device::release_count() - self.released
    }
    /// Change in live exports since [`counts`].
    pub fn live_since(&self) -> i64 {
        devbuf::arrow::c_device::live_exports() - self.live
    }
}

type F16 = <arrow_array::types::Float16Type as ArrowPrimitiveType>::Native;

fn opt<T: Clone>(v: &[T], nulls_every: usize) -> Vec<Option<T>> {
    v.iter()
        .enumerate()
        .map(|(i, x)| (i % nulls_every != 1).then(|| x.clone()))
        .collect()
}

/// Every primitive, temporal and decimal type (with nulls).
pub fn primitives() -> Vec<(&'static str, ArrayRef)> {
    let n = 37usize;
    let i: Vec<i64> = (0..n as i64).map(|x| x * 7919 - 100_003).collect();
    vec![
        (
            "int8",
            Arc::new(Int8Array::from(opt(
                &i.iter().map(|&x| x as i8).collect::<Vec<_>>(),
                3,
            ))) as ArrayRef,
        ),
        (
            "int16",
            Arc::new(Int16Array::from(opt(
                &i.iter().map(|&x| x as i16).collect::<Vec<_>>(),
                4,
            ))),
        ),
        (
            "int32",
            Arc::new(Int32Array::from(opt(
                &i.iter().map(|&x| x as i32).collect::<Vec<_>>(),
                5,
            ))),
        ),
        ("int64", Arc::new(Int64Array::from(opt(&i, 6)))),
        (
            "uint8",
            Arc::new(UInt8Array::from(opt(
                &i.iter().map(|&x| x as u8).collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "uint16",
            Arc::new(UInt16Array::from(opt(
                &i.iter().map(|&x| x as u16).collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "uint32",
            Arc::new(UInt32Array::from(opt(
                &i.iter().map(|&x| x as u32).collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "uint64",
            Arc::new(PrimitiveArray::<UInt64Type>::from(opt(
                &i.iter().map(|&x| x as u64).collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "float16",
            Arc::new(Float16Array::from(opt(
                &i.iter()
                    .map(|&x| F16::from_f32(x as f32 / 64.0))
                    .collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "float32",
            Arc::new(Float32Array::from(opt(
                &i.iter().map(|&x| x as f32 / 3.0).collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "float64",
            Arc::new(Float64Array::from(opt(
                &i.iter().map(|&x| x as f64 / 3.0).collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "decimal32",
            Arc::new(
                Decimal32Array::from(opt(&i.iter().map(|&x| x as i32).collect::<Vec<_>>(), 3))
                    .with_precision_and_scale(9, 2)
                    .expect("decimal32"),
            ),
        ),
        (
            "decimal64",
            Arc::new(
                Decimal64Array::from(opt(&i, 3))
                    .with_precision_and_scale(18, 3)
                    .expect("decimal64"),
            ),
        ),
        (
            "decimal128",
            Arc::new(
                Decimal128Array::from(opt(
                    &i.iter()
                        .map(|&x| x as i128 * 1_000_000_007)
                        .collect::<Vec<_>>(),
                    3,
                ))
                .with_precision_and_scale(38, 5)
                .expect("decimal128"),
            ),
        ),
        (
            "decimal256",
            Arc::new(
                Decimal256Array::from(opt(
                    &i.iter()
                        .map(|&x| i256::from_i128(x as i128) * i256::from_i128(1 << 100))
                        .collect::<Vec<_>>(),
                    3,
                ))
                .with_precision_and_scale(76, 4)
                .expect("decimal256"),
            ),
        ),
        (
            "date32",
            Arc::new(Date32Array::from(opt(
                &i.iter().map(|&x| x as i32).collect::<Vec<_>>(),
                3,
            ))),
        ),
        ("date64", Arc::new(Date64Array::from(opt(&i, 3)))),
        (
            "time32s",
            Arc::new(Time32SecondArray::from(opt(
                &i.iter()
                    .map(|&x| (x.rem_euclid(86_400)) as i32)
                    .collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "time32ms",
            Arc::new(Time32MillisecondArray::from(opt(
                &i.iter()
                    .map(|&x| x.rem_euclid(86_400_000) as i32)
                    .collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "time64us",
            Arc::new(Time64MicrosecondArray::from(opt(
                &i.iter()
                    .map(|&x| x.rem_euclid(86_400_000_000))
                    .collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "time64ns",
            Arc::new(Time64NanosecondArray::from(opt(
                &i.iter()
                    .map(|&x| x.rem_euclid(86_400_000_000_000))
                    .collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "timestamp_s",
            Arc::new(TimestampSecondArray::from(opt(&i, 3))),
        ),
        (
            "timestamp_ms_tz",
            Arc::new(TimestampMillisecondArray::from(opt(&i, 3)).with_timezone("Europe/Paris")),
        ),
        (
            "timestamp_us_tz",
            Arc::new(TimestampMicrosecondArray::from(opt(&i, 3)).with_timezone("+05:30")),
        ),
        (
            "timestamp_ns",
            Arc::new(TimestampNanosecondArray::from(opt(&i, 3))),
        ),
        (
            "duration_s",
            Arc::new(DurationSecondArray::from(opt(&i, 3))),
        ),
        (
            "duration_ns",
            Arc::new(DurationNanosecondArray::from(opt(&i, 3))),
        ),
        (
            "interval_ym",
            Arc::new(IntervalYearMonthArray::from(opt(
                &i.iter().map(|&x| x as i32).collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "interval_dt",
            Arc::new(IntervalDayTimeArray::from(opt(
                &i.iter()
                    .map(|&x| IntervalDayTime::new(x as i32, -(x as i32)))
                    .collect::<Vec<_>>(),
                3,
            ))),
        ),
        (
            "interval_mdn",
            Arc::new(IntervalMonthDayNanoArray::from(opt(
                &i.iter()
                    .map(|&x| IntervalMonthDayNano::new(x as i32, 2, x * 1000))
                    .collect::<Vec<_>>(),
                3,
            ))),
        ),
    ]
}

fn words(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            "αβγdevbuf"
                .chars()
                .cycle()
                .skip(i % 7)
                .take(i % 11)
                .collect()
        })
        .collect()
}

/// Boolean, binary-like, nested, dictionary, null, union and run-end encoded arrays.
pub fn others() -> Vec<(&'static str, ArrayRef)> {
    let n = 29usize;
    let w = words(n);
    let bools: Vec<Option<bool>> = (0..n).map(|i| (i % 4 != 2).then_some(i % 3 == 0)).collect();
    let strs: Vec<Option<&str>> = w
        .iter()
        .enumerate()
        .map(|(i, s)| (i % 5 != 3).then_some(s.as_str()))
        .collect();
    let bins: Vec<Option<&[u8]>> = w
        .iter()
        .enumerate()
        .map(|(i, s)| (i % 4 != 0).then_some(s.as_bytes()))
        .collect();

    let mut list = ListBuilder::new(Int32Builder::new());
    let mut llist = LargeListBuilder::new(StringBuilder::new());
    let mut fsl = FixedSizeListBuilder::new(Float32Builder::new(), 3);
    let mut map = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    let mut dict = StringDictionaryBuilder::<Int16Type>::new();
    for i in 0..n {
        if i % 6 == 5 {
            list.append_null();
            llist.append_null();
            map.append(false).expect("map");
        } else {
            for j in 0..(i % 4) {
                list.values()
                    .append_option((j != 1).then_some((i * 10 + j) as i32));
                llist.values().append_value(&w[(i + j) % n]);
                map.keys().append_value(format!("k{j}"));
                map.values().append_value((i * j) as i32);
            }
            list.append(true);
            llist.append(true);
            map.append(true).expect("map");
        }
        for j in 0..3 {
            fsl.values().append_value((i * 3 + j) as f32 * 0.5);
        }
        fsl.append(i % 7 != 2);
        if i % 5 == 4 {
            dict.append_null();
        } else {
            dict.append_value(["red", "green", "blue"][i % 3]);
        }
    }
    let structs = StructArray::try_new(
        vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Utf8, true),
            Field::new("c", DataType::Boolean, false),
        ]
        .into(),
        vec![
            Arc::new(Int32Array::from(
                (0..n as i32)
                    .map(|x| (x % 3 != 0).then_some(x))
                    .collect::<Vec<_>>(),
            )) as ArrayRef,
            Arc::new(StringArray::from(strs.clone())) as ArrayRef,
            Arc::new(BooleanArray::from(
                (0..n).map(|x| x % 2 == 0).collect::<Vec<_>>(),
            )) as ArrayRef,
        ],
        Some((0..n).map(|i| i % 9 != 4).collect::<Vec<_>>().into()),
    )
    .expect("struct");
    let fsb = FixedSizeBinaryArray::try_from_sparse_iter_with_size(
        (0..n).map(|i| (i % 3 != 1).then_some([i as u8, 1, 2, 3, 4])),
        5,
    )
    .expect("fsb");
    let union_fields = UnionFields::try_new(
        vec![0, 5],
        vec![
            Field::new("i", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
        ],
    )
    .expect("union fields");
    let type_ids: Vec<i8> = (0..n).map(|i| if i % 3 == 0 { 5 } else { 0 }).collect();
    let sparse = UnionArray::try_new(
        union_fields.clone(),
        ScalarBuffer::from(type_ids.clone()),
        None,
        vec![
            Arc::new(Int32Array::from(
                (0..n as i32)
                    .map(|x| (x % 4 != 1).then_some(x * 3))
                    .collect::<Vec<_>>(),
            )) as ArrayRef,
            Arc::new(StringArray::from(strs.clone())) as ArrayRef,
        ],
    )
    .expect("sparse union");
    let n_s = type_ids.iter().filter(|&&t| t == 5).count();
    let mut offsets = Vec::with_capacity(n);
    let (mut oi, mut os) = (0i32, 0i32);
    for &t in &type_ids {
        if t == 5 {
            offsets.push(os);
            os += 1;
        } else {
            offsets.push(oi);
            oi += 1;
        }
    }
    let dense = UnionArray::try_new(
        union_fields,
        ScalarBuffer::from(type_ids),
        Some(ScalarBuffer::from(offsets)),
        vec![
            Arc::new(Int32Array::from(
                (0..(n - n_s) as i32)
                    .map(|x| (x % 4 != 1).then_some(-x))
                    .collect::<Vec<_>>(),
            )) as ArrayRef,
            Arc::new(StringArray::from(
                w[..n_s]
                    .iter()
                    .map(|s| Some(s.as_str()))
                    .collect::<Vec<_>>(),
            )) as ArrayRef,
        ],
    )
    .expect("dense union");
    let ree = RunArray::<Int32Type>::try_new(
        &Int32Array::from(vec![3, 4, 9, 10, 17]),
        &StringArray::from(vec![Some("a"), None, Some("bb"), Some("ccc"), None]),
    )
    .expect("run-end encoded");
    let list_view = ListViewArray::try_new(
        Arc::new(Field::new_list_field(DataType::Int32, true)),
        ScalarBuffer::from(vec![0i32, 2, 1, 0]),
        ScalarBuffer::from(vec![2i32, 3, 0, 1]),
        Arc::new(Int32Array::from(vec![
            Some(1),
            None,
            Some(3),
            Some(4),
            Some(5),
        ])),
        Some(vec![true, true, false, true].into()),
    )
    .expect("list view");
    let nested_dict = DictionaryArray::<Int8Type>::try_new(
        Int8Array::from(vec![Some(1), None, Some(0), Some(1)]),
        Arc::new(list.finish_cloned()),
    )
    .expect("dictionary of lists");
    let list_offsets = OffsetBuffer::new(ScalarBuffer::from(vec![0i32, 2, 2, 5]));
    let list_of_struct = ListArray::try_new(
        Arc::new(Field::new_list_field(structs.data_type().clone(), true)),
        list_offsets,
        Arc::new(structs.slice(0, 5)),
        Some(vec![true, false, true].into()),
    )
    .expect("list of struct");
    vec![
        ("bool", Arc::new(BooleanArray::from(bools)) as ArrayRef),
        ("utf8", Arc::new(StringArray::from(strs.clone()))),
        ("large_utf8", Arc::new(LargeStringArray::from(strs.clone()))),
        ("binary", Arc::new(BinaryArray::from(bins.clone()))),
        (
            "large_binary",
            Arc::new(LargeBinaryArray::from(bins.clone())),
        ),
        ("fixed_size_binary", Arc::new(fsb)),
        ("list", Arc::new(list.finish())),
        ("large_list", Arc::new(llist.finish())),
        ("fixed_size_list", Arc::new(fsl.finish())),
        ("struct", Arc::new(structs)),
        ("map", Arc::new(map.finish())),
        ("dictionary", Arc::new(dict.finish())),
        ("dictionary_of_lists", Arc::new(nested_dict)),
        ("list_of_struct", Arc::new(list_of_struct)),
        ("null", Arc::new(NullArray::new(n))),
        ("sparse_union", Arc::new(sparse)),
        ("dense_union", Arc::new(dense)),
        ("run_end_encoded", Arc::new(ree)),
        ("list_view", Arc::new(list_view)),
        (
            "empty_utf8",
            Arc::new(StringArray::from(Vec::<&str>::new())),
        ),
        ("empty_int64", Arc::new(Int64Array::from(Vec::<i64>::new()))),
        (
            "empty_struct",
            Arc::new(StructArray::new_empty_fields(0, None)),
        ),
        (
            "all_null_utf8",
            Arc::new(StringArray::from(vec![None::<&str>; 9])),
        ),
        ("large_utf8_builder", {
            let mut b = LargeStringBuilder::new();
            b.append_value("x");
            b.append_null();
            Arc::new(b.finish())
        }),
    ]
}

/// View types: supported on the host, refused for CUDA.
pub fn views() -> Vec<(&'static str, ArrayRef)> {
    let long = "a string longer than twelve bytes";
    vec![
        (
            "utf8_view",
            Arc::new(StringViewArray::from(vec![
                Some("short"),
                None,
                Some(long),
                Some(""),
                Some(long),
            ])) as ArrayRef,
        ),
        (
            "binary_view",
            Arc::new(BinaryViewArray::from(vec![
                Some(b"ab".as_ref()),
                Some(long.as_bytes()),
                None,
            ])),
        ),
    ]
}

/// Slices (offsets that are not multiples of 8 where the type allows) of several
/// arrays of [`primitives`] and [`others`].
pub fn slices() -> Vec<(String, ArrayRef)> {
    let mut out = Vec::new();
    for (name, a) in primitives().into_iter().chain(others()) {
        if a.len() >= 13
            && matches!(
                name,
                "int32"
                    | "float16"
                    | "decimal128"
                    | "interval_mdn"
                    | "bool"
                    | "utf8"
                    | "large_binary"
                    | "fixed_size_binary"
                    | "list"
                    | "large_list"
                    | "fixed_size_list"
                    | "struct"
                    | "map"
                    | "dictionary"
                    | "null"
                    | "sparse_union"
                    | "dense_union"
            )
        {
            out.push((format!("{name}[3..13]"), a.slice(3, 10)));
            out.push((format!("{name}[11..]"), a.slice(11, a.len() - 11)));
            out.push((format!("{name}[5..5]"), a.slice(5, 0)));
        }
    }
    out
}

/// Everything above (except view types), by name.
pub fn all() -> Vec<(String, ArrayRef)> {
    primitives()
        .into_iter()
        .chain(others())
        .map(|(n, a)| (n.to_string(), a))
        .chain(slices())
        .collect()
}

/// The number of C structures an exported array is made of (itself, children,
/// dictionaries, recursively).
pub fn node_count(data: &arrow_data::ArrayData) -> u64 {
    1 + data.child_data().iter().map(node_count).sum::<u64>()
}
