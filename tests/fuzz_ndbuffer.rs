//! Fuzzing (time-bounded, `DEVBUF_FUZZ_SECS`; see tests/common/fuzz.rs) of NDBuffer
//! selections against the `ndarray` oracle of tests/common/ndbuffer_oracle.rs.
//!
//! Inputs: arrays of every element type and byte order, C or F order, 0 to 4 axes
//! (zero-length ones included), and selections of up to 5 selectors of any kind with
//! ordinary and extreme arguments (indices and slice bounds of `isize::MIN`/`MAX`,
//! steps of 0, negative or huge, ranges past the end, more selectors than axes). An
//! independent model says which selections are valid and what they select. Outcome:
//! `get` and `set_scalar` succeed exactly on the valid ones with the oracle's values,
//! and refuse the others with an `InvalidArgument`; the array is unchanged by a refused
//! `set_scalar`.

#[path = "common/fuzz.rs"]
mod fuzz;
#[path = "common/ndbuffer_oracle.rs"]
mod oracle;

use devbuf::ElementType;
use devbuf::Error;
use devbuf::zarr::{AxisSel, Slice};
use fuzz::fuzz;
use ndarray::{ArrayD, IxDyn};
use oracle::*;
use proptest::prelude::*;

const USIZE_EXTREMES: [usize; 8] = [
    8,
    63,
    1 << 31,
    1 << 62,
    isize::MAX as usize,
    usize::MAX / 2 + 1,
    usize::MAX - 1,
    usize::MAX,
];

const ISIZE_EXTREMES: [isize; 8] = [
    isize::MAX,
    isize::MIN,
    isize::MIN + 1,
    1 << 40,
    -(1 << 40),
    1 << 31,
    -(1 << 31),
    -8,
];

fn uext() -> impl Strategy<Value = usize> {
    prop_oneof![5 => 0usize..7, 1 => proptest::sample::select(&USIZE_EXTREMES[..])]
}

fn iext() -> impl Strategy<Value = isize> {
    prop_oneof![5 => -7isize..8, 1 => proptest::sample::select(&ISIZE_EXTREMES[..])]
}

fn axis_sel() -> impl Strategy<Value = AxisSel> {
    prop_oneof![
        3 => iext().prop_map(AxisSel::Index),
        2 => (uext(), uext(), uext()).prop_map(|(start, end, step)| AxisSel::Range { start, end, step }),
        3 => (proptest::option::of(iext()), proptest::option::of(iext()), iext())
            .prop_map(|(a, b, s)| AxisSel::Slice(Slice::new(a, b, s))),
        1 => Just(AxisSel::Full),
    ]
}

type Model = Vec<Result<usize, Vec<usize>>>;

/// What `sel` selects on `shape` (per axis: `Ok(index)`, the axis dropped, or
/// `Err(indices)`), or `None` when it is invalid. Independent of devbuf's resolver.
fn model(sel: &[AxisSel], shape: &[usize]) -> Option<Model> {
    if sel.len() > shape.len() {
        return None;
    }
    let mut m = Vec::new();
    for (ax, &len) in shape.iter().enumerate() {
        let Some(s) = sel.get(ax) else {
            m.push(Err((0..len).collect()));
            continue;
        };
        m.push(match *s {
            AxisSel::Index(i) => {
                let j = if i < 0 {
                    i as i128 + len as i128
                } else {
                    i as i128
                };
                if j < 0 || j >= len as i128 {
                    return None;
                }
                Ok(j as usize)
            }
            AxisSel::Range { start, end, step } => {
                let end = if end == usize::MAX { len } else { end };
                if step == 0 || start > end || end > len {
                    return None;
                }
                Err((start..end).step_by(step).collect())
            }
            AxisSel::Slice(s) => {
                if s.step <= 0 {
                    return None;
                }
                Err(slice_indices(&s, len))
            }
            AxisSel::Full => Err((0..len).collect()),
        });
    }
    Some(m)
}

fn refused(e: &Error) -> Result<(), String> {
    match e {
        Error::InvalidArgument(m) if !m.is_empty() && m.len() < 2048 => Ok(()),
        e => Err(format!("refused with the wrong kind or message: {e:?}")),
    }
}

type Input = ((usize, bool, Vec<usize>, bool, u64), Vec<AxisSel>, usize);

#[test]
fn fuzz_ndbuffer_selections() {
    let input = (
        case(),
        proptest::collection::vec(axis_sel(), 0..=5),
        0..ElementType::ALL.len(),
    );
    let r = fuzz("ndbuffer selections", input, |(c, sel, vt): Input| {
        let (mut rng, dtype, order, shape) = setup(c);
        let o = random_oracle(&mut rng, dtype.element(), &shape);
        let nd = build(&o, dtype, order);
        let m = model(&sel, &shape);
        // get
        let got = nd.get(&sel);
        match (&got, &m) {
            (Ok(g), Some(m)) => {
                let want = oracle_get(&o, m);
                if !same(&values(g), &want) {
                    return Err(format!("get {sel:?} of {shape:?}: other values"));
                }
            }
            (Err(e), None) => refused(e)?,
            (Ok(g), None) => {
                return Err(format!(
                    "get {sel:?} of {shape:?} is invalid but gave {:?}",
                    g.shape()
                ));
            }
            (Err(e), Some(_)) => {
                return Err(format!("get {sel:?} of {shape:?} is valid but failed: {e}"));
            }
        }
        // set_scalar, on a fresh array
        let v = random_scalar(&mut rng, ElementType::ALL[vt]);
        let mut target = build(&o, dtype, order);
        match (target.set_scalar(&sel, v), &m) {
            (Ok(()), Some(m)) => {
                let sel_shape: Vec<usize> = m
                    .iter()
                    .filter_map(|x| x.as_ref().err().map(|v| v.len()))
                    .collect();
                let mut want = o.clone();
                oracle_set(
                    &mut want,
                    m,
                    &ArrayD::from_elem(IxDyn(&sel_shape), v.cast(dtype.element())),
                );
                if !same(&values(&target), &want) {
                    return Err(format!("set_scalar {sel:?} of {shape:?}: other values"));
                }
            }
            (Err(e), None) => {
                refused(&e)?;
                if !same(&values(&target), &o) {
                    return Err(format!("a refused set_scalar {sel:?} changed the array"));
                }
            }
            (Ok(()), None) => {
                return Err(format!(
                    "set_scalar {sel:?} of {shape:?} is invalid but worked"
                ));
            }
            (Err(e), Some(_)) => {
                return Err(format!(
                    "set_scalar {sel:?} of {shape:?} is valid but failed: {e}"
                ));
            }
        }
        Ok(if m.is_some() { "valid" } else { "refused" })
    });
    assert!(r.tally.get("valid") > 0 && r.tally.get("refused") > 0);
}
