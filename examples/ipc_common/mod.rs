//! The record batch the IPC producer and consumer examples exchange (both build it, so
//! the consumer can check what it read).

use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int32Array, RecordBatch, StringArray,
};

/// Five rows: integers, floats with a null, strings, booleans, a list column and a
/// dictionary-encoded column.
pub fn demo_batch() -> RecordBatch {
    let mut lists = ListBuilder::new(Int64Builder::new());
    for row in [vec![1, 2], vec![], vec![3], vec![4, 5, 6], vec![7]] {
        for v in row {
            lists.values().append_value(v);
        }
        lists.append(true);
    }
    let colors: DictionaryArray<Int32Type> =
        vec![Some("red"), Some("green"), None, Some("red"), Some("blue")]
            .into_iter()
            .collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(Int32Array::from(vec![1, 2, 3, 4, 5]))),
        (
            "score",
            Arc::new(Float64Array::from(vec![
                Some(0.5),
                Some(1.25),
                None,
                Some(3.0),
                Some(-2.5),
            ])),
        ),
        (
            "name",
            Arc::new(StringArray::from(vec![
                "ada", "grace", "linus", "barbara", "ken",
            ])),
        ),
        (
            "active",
            Arc::new(BooleanArray::from(vec![true, false, true, true, false])),
        ),
        ("tags", Arc::new(lists.finish())),
        ("color", Arc::new(colors)),
    ];
    RecordBatch::try_from_iter(columns).expect("demo batch")
}
