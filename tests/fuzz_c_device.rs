//! Fuzzing (time-bounded, `DEVBUF_FUZZ_SECS`; see tests/common/fuzz.rs) of the
//! structurally checkable parts of Arrow C Device Data Interface imports.
//!
//! Each input exports an array of the corpus (tests/common/c_device_corpus.rs: every
//! type with nulls, slices, nested and dictionary types) with arrow-rs's own C Data
//! Interface, wraps it as an `ArrowDeviceArray`, and changes what a consumer can check
//! without trusting the producer: negative lengths, offsets and null counts, lengths
//! shrunk or offsets moved within the data, wrong buffer and child counts, null buffer,
//! child and dictionary pointers, released (children) structures, and any device type
//! and id. (It never makes a structure claim more memory than it has: no C interface
//! can check that.) Outcome: `import_array` returns an error, or an array that
//! passes arrow-rs's full validation (the original when nothing changed); the
//! producer's release runs exactly once either way (not at all for a structure that
//! arrived released); never a panic.

#[path = "common/c_device_corpus.rs"]
mod corpus;
#[path = "common/fuzz.rs"]
mod fuzz;
#[path = "common/c_device_raw.rs"]
mod raw_abi;

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::{Array, ArrayRef};
use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::Field;
use devbuf::arrow::AnyArray;
use devbuf::arrow::c_device::{
    ARROW_DEVICE_CPU, ARROW_DEVICE_CUDA, ARROW_DEVICE_CUDA_HOST, ARROW_DEVICE_ROCM,
    ArrowDeviceArray, FFI_ArrowSchema, import_array,
};
use fuzz::fuzz;
use proptest::prelude::*;
use raw_abi::{RawArray, RawDeviceArray};

type Release = unsafe extern "C" fn(*mut RawArray);

/// The producer's own release of each top-level structure, by its private data.
static ORIGINAL: Mutex<Option<HashMap<usize, Release>>> = Mutex::new(None);
static RELEASES: AtomicUsize = AtomicUsize::new(0);

/// Counts the release of a top-level structure and calls the producer's.
unsafe extern "C" fn counting_release(a: *mut RawArray) {
    // Safety: called by the consumer on a structure whose release we replaced.
    let key = unsafe { (*a).private_data } as usize;
    let original = ORIGINAL
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_mut()
        .and_then(|m| m.remove(&key));
    RELEASES.fetch_add(1, Ordering::SeqCst);
    match original {
        // Safety: the producer's release of this structure.
        Some(f) => unsafe { f(a) },
        None => panic!("release called twice (or on a structure not ours)"),
    }
}

#[derive(Clone, Copy, Debug)]
enum Mutation {
    /// A negative length, or the length shrunk to at most this.
    Length(usize, i64),
    /// A negative offset, or the offset moved on by up to this (the length shrunk by as much).
    Offset(usize, i64),
    NullCount(usize, i64),
    NBuffers(usize, i64),
    NullBuffer(usize, usize),
    NullBuffers(usize),
    NChildren(usize, i64),
    NullChild(usize, usize),
    NullChildren(usize),
    NullDictionary(usize),
    /// A child (or dictionary) that is already released.
    ReleasedChild(usize),
}

const COUNTS: [i64; 9] = [-1, 0, 1, 2, 3, 4, 5, i64::MAX, i64::MIN];
const VALUES: [i64; 10] = [-1, -2, i64::MIN, 0, 1, 2, 3, 17, i64::MAX, -(1 << 40)];

fn mutation() -> impl Strategy<Value = Mutation> {
    let node = any::<usize>();
    let v = proptest::sample::select(&VALUES[..]);
    let c = proptest::sample::select(&COUNTS[..]);
    prop_oneof![
        3 => (node, v.clone()).prop_map(|(n, v)| Mutation::Length(n, v)),
        2 => (node, v.clone()).prop_map(|(n, v)| Mutation::Offset(n, v)),
        2 => (node, v).prop_map(|(n, v)| Mutation::NullCount(n, v)),
        2 => (node, c.clone()).prop_map(|(n, v)| Mutation::NBuffers(n, v)),
        2 => (node, any::<usize>()).prop_map(|(n, i)| Mutation::NullBuffer(n, i)),
        1 => node.prop_map(Mutation::NullBuffers),
        2 => (node, c).prop_map(|(n, v)| Mutation::NChildren(n, v)),
        2 => (node, any::<usize>()).prop_map(|(n, i)| Mutation::NullChild(n, i)),
        1 => node.prop_map(Mutation::NullChildren),
        1 => node.prop_map(Mutation::NullDictionary),
        1 => node.prop_map(Mutation::ReleasedChild),
    ]
}

/// A node of the structure tree and the counts the producer wrote.
struct Node {
    ptr: *mut RawArray,
    n_buffers: usize,
    n_children: usize,
    parent_owned: bool,
}

/// Every node (pre-order: the array, its children, its dictionary).
fn nodes(a: *mut RawArray, out: &mut Vec<Node>, top: bool) {
    // Safety: a structure exported by arrow-rs, not yet changed.
    let r = unsafe { &*a };
    out.push(Node {
        ptr: a,
        n_buffers: r.n_buffers as usize,
        n_children: r.n_children as usize,
        parent_owned: !top,
    });
    for i in 0..r.n_children as usize {
        // Safety: as above; `children` holds `n_children` pointers.
        nodes(unsafe { *r.children.add(i) }, out, false);
    }
    if !r.dictionary.is_null() {
        nodes(r.dictionary, out, false);
    }
}

/// A copy of a pointer array with entry `i` null (leaked: the producer's release frees
/// its own array, which it keeps).
fn with_null<T>(ptrs: *mut *mut T, n: usize, i: usize) -> *mut *mut T {
    let mut v: Vec<*mut T> = (0..n)
        // Safety: the producer's array of `n` pointers.
        .map(|k| unsafe { *ptrs.add(k) })
        .collect();
    v[i % n] = std::ptr::null_mut();
    Box::leak(v.into_boxed_slice()).as_mut_ptr()
}

/// Applies `m`; whether it changed anything the consumer may see.
fn apply(m: Mutation, nodes: &[Node]) -> bool {
    let pick = |n: usize| &nodes[n % nodes.len()];
    // Safety (all): the nodes are live structures of the export being fuzzed; only
    // their plain fields change, and pointer arrays are replaced, never written.
    unsafe {
        match m {
            Mutation::Length(n, v) => {
                let a = &mut *pick(n).ptr;
                let new = if v < 0 { v } else { v.min(a.length) };
                std::mem::replace(&mut a.length, new) != new
            }
            Mutation::Offset(n, v) => {
                let a = &mut *pick(n).ptr;
                if v < 0 {
                    a.offset = v;
                    true
                } else if a.offset >= 0 && a.length > 0 {
                    let k = v.min(a.length);
                    a.offset = a.offset.saturating_add(k);
                    a.length -= k;
                    k > 0
                } else {
                    false
                }
            }
            Mutation::NullCount(n, v) => {
                let a = &mut *pick(n).ptr;
                std::mem::replace(&mut a.null_count, v) != v
            }
            Mutation::NBuffers(n, v) => {
                let a = &mut *pick(n).ptr;
                std::mem::replace(&mut a.n_buffers, v) != v
            }
            Mutation::NullBuffer(n, i) => {
                let node = pick(n);
                let a = &mut *node.ptr;
                if node.n_buffers == 0 || a.buffers.is_null() {
                    return false;
                }
                a.buffers = with_null(a.buffers.cast::<*mut c_void>(), node.n_buffers, i).cast();
                true
            }
            Mutation::NullBuffers(n) => {
                let a = &mut *pick(n).ptr;
                !std::mem::replace(&mut a.buffers, std::ptr::null_mut()).is_null()
            }
            Mutation::NChildren(n, v) => {
                let a = &mut *pick(n).ptr;
                std::mem::replace(&mut a.n_children, v) != v
            }
            Mutation::NullChild(n, i) => {
                let node = pick(n);
                let a = &mut *node.ptr;
                if node.n_children == 0 || a.children.is_null() {
                    return false;
                }
                a.children = with_null(a.children, node.n_children, i);
                true
            }
            Mutation::NullChildren(n) => {
                let a = &mut *pick(n).ptr;
                !std::mem::replace(&mut a.children, std::ptr::null_mut()).is_null()
            }
            Mutation::NullDictionary(n) => {
                let a = &mut *pick(n).ptr;
                !std::mem::replace(&mut a.dictionary, std::ptr::null_mut()).is_null()
            }
            Mutation::ReleasedChild(n) => {
                let node = pick(n);
                if !node.parent_owned {
                    return false;
                }
                // Released by the producer (its parent then frees only the box); the
                // private data it owned is leaked.
                (*node.ptr).release.take().is_some()
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Input {
    array: usize,
    mutations: Vec<Mutation>,
    released: bool,
    device: (i32, i64),
}

#[test]
fn fuzz_c_device_imports() {
    let arrays: Vec<(String, ArrayRef)> = corpus::all();
    let devices = [
        (ARROW_DEVICE_CPU, -1i64),
        (ARROW_DEVICE_CPU, -1),
        (ARROW_DEVICE_CPU, -1),
        (ARROW_DEVICE_CPU, -1),
        (ARROW_DEVICE_CPU, -1),
        (ARROW_DEVICE_CPU, -1),
        (ARROW_DEVICE_CPU, 0),
        (ARROW_DEVICE_CUDA_HOST, 0),
        (ARROW_DEVICE_CUDA, 0),
        (ARROW_DEVICE_ROCM, 0),
        (12345, i64::MIN),
    ];
    *ORIGINAL.lock().unwrap() = Some(HashMap::new());
    let input = (
        0..arrays.len(),
        proptest::collection::vec(mutation(), 0..4),
        proptest::bool::weighted(0.05),
        proptest::sample::select(devices.to_vec()),
    )
        .prop_map(|(array, mutations, released, device)| Input {
            array,
            mutations,
            released,
            device,
        });
    let r = fuzz("c device imports (structural)", input, |input: Input| {
        let (name, array) = &arrays[input.array];
        let data = array.to_data();
        let schema = FFI_ArrowSchema::try_from(&Field::new("", data.data_type().clone(), true))
            .map_err(|e| format!("{name}: {e}"))?;
        let ffi = FFI_ArrowArray::new(&data);
        // Safety: `FFI_ArrowArray` is the C `struct ArrowArray`, as `RawArray` is.
        let mut raw: RawArray = unsafe { std::mem::transmute::<FFI_ArrowArray, RawArray>(ffi) };
        let mut all = Vec::new();
        nodes(&mut raw, &mut all, true);
        // `raw` moves below: the top node is addressed through `raw` itself.
        let mut changed = false;
        for m in &input.mutations {
            changed |= apply(*m, &all);
        }
        let original = raw.release.expect("an exported structure is live");
        ORIGINAL
            .lock()
            .unwrap()
            .as_mut()
            .unwrap()
            .insert(raw.private_data as usize, original);
        raw.release = Some(counting_release);
        let (device_type, device_id) = input.device;
        let cpu = device_type == ARROW_DEVICE_CPU && device_id == -1;
        let mut arrived_released = false;
        if input.released {
            // A structure that arrives released: the consumer must not touch it (its
            // private data is leaked).
            raw.release = None;
            arrived_released = true;
        }
        let mut d = RawDeviceArray {
            array: raw,
            device_id,
            device_type,
            sync_event: std::ptr::null_mut(),
            reserved: [0; 3],
        };
        // Safety: the structure is valid as far as its pointers go; the fields under
        // test may contradict the data type.
        let mut device =
            unsafe { ArrowDeviceArray::from_raw((&mut d as *mut RawDeviceArray).cast()) };
        let before = RELEASES.load(Ordering::SeqCst);
        let result = import_array(&mut device, &schema, None).and_then(AnyArray::into_host);
        let outcome = match result {
            Ok(back) => {
                if arrived_released {
                    return Err(format!("{name}: imported a released structure"));
                }
                back.to_data()
                    .validate_full()
                    .map_err(|e| format!("{name}: imported an invalid array: {e} ({input:?})"))?;
                if !changed && cpu && back.as_ref() != array.as_ref() {
                    return Err(format!("{name}: an unchanged export imported other values"));
                }
                // (An import that holds no buffer of the producer's, e.g. of the null
                // type, releases at once: only the total is checked, below.)
                drop(back);
                if changed {
                    "imported (changed)"
                } else {
                    "imported"
                }
            }
            Err(e) => {
                let m = e.to_string();
                if m.is_empty() || m.len() > 4096 {
                    return Err(format!("{name}: an error of {} bytes", m.len()));
                }
                if !changed && cpu && !arrived_released {
                    return Err(format!("{name}: an unchanged export was refused: {m}"));
                }
                "refused"
            }
        };
        // An import that refused the structure without taking it (an unsupported device
        // type, a data type it does not import) leaves it to the caller: dropping it
        // releases it.
        let taken = device.array().is_released();
        drop(device);
        let released = RELEASES.load(Ordering::SeqCst) - before;
        let want = usize::from(!arrived_released);
        let outcome = match (outcome, taken) {
            ("refused", false) if !arrived_released => "refused untouched",
            (o, _) => o,
        };
        if released != want {
            return Err(format!(
                "{name}: released {released} times, expected {want} ({outcome}, {input:?})"
            ));
        }
        Ok(outcome)
    });
    assert!(r.tally.get("refused") > 0 && r.tally.get("imported") > 0);
}
