//! The plan of a read: which decode units (chunks, or inner chunks of shards) the
//! requested boxes touch, and for each unit where its selected part goes in the output.
//! Every unit appears once, whatever the selection: it is fetched and decoded once and
//! placed once per box that needs it.

use std::collections::BTreeMap;

use devbuf_core::error::{Error, Result};

/// A box of the array to read into the output: `start`/`shape` per axis, written in C
/// order at byte `offset` of the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadBox {
    pub start: Vec<u64>,
    pub shape: Vec<u64>,
    pub offset: usize,
}

/// Where part of a decoded unit goes: the box `start`/`shape` inside the unit (in the
/// unit's own coordinates), copied to byte `dst_offset` of the output with the
/// destination's byte strides `dst_strides`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The request this placement serves (its index in the plan's requests).
    pub req: usize,
    pub start: Vec<u64>,
    pub shape: Vec<u64>,
    pub dst_offset: usize,
    pub dst_strides: Vec<isize>,
}

/// One decode unit: its index in the decode grid and its placements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unit {
    pub cell: Vec<u64>,
    pub placements: Vec<Placement>,
}

/// C-order byte strides of `shape`.
pub(crate) fn c_strides(shape: &[u64], elem: usize) -> Vec<isize> {
    let mut s = vec![0isize; shape.len()];
    let mut acc = elem as isize;
    for k in (0..shape.len()).rev() {
        s[k] = acc;
        acc = acc.saturating_mul(shape[k] as isize);
    }
    s
}

/// F-order byte strides of `shape`.
pub(crate) fn f_strides(shape: &[u64], elem: usize) -> Vec<isize> {
    let mut s = vec![0isize; shape.len()];
    let mut acc = elem as isize;
    for k in 0..shape.len() {
        s[k] = acc;
        acc = acc.saturating_mul(shape[k] as isize);
    }
    s
}

/// The decode units that `requests` touch, on a decode grid of cells of `cell_shape`
/// over an array of `array_shape`, in C order of their cell indices. `max_units`
/// bounds the count (an error past it: the caller passes what its output size allows).
pub(crate) fn plan(
    requests: &[ReadBox],
    array_shape: &[u64],
    cell_shape: &[u64],
    elem: usize,
    max_units: usize,
) -> Result<Vec<Unit>> {
    let nd = array_shape.len();
    if cell_shape.len() != nd || cell_shape.contains(&0) {
        return Err(Error::invalid(format!(
            "decode grid {cell_shape:?} does not fit an array of shape {array_shape:?}"
        )));
    }
    // One box touches each cell once, in C order already: its units are built in
    // place (a read of a sharded array plans thousands of units). Several boxes may
    // share cells: their placements are gathered per cell.
    let single = requests.iter().filter(|r| !r.shape.contains(&0)).count() <= 1;
    let mut direct: Vec<Unit> = Vec::new();
    let mut units: BTreeMap<Vec<u64>, Vec<Placement>> = BTreeMap::new();
    for (req, r) in requests.iter().enumerate() {
        if r.start.len() != nd || r.shape.len() != nd {
            return Err(Error::invalid(format!(
                "box {:?}+{:?} does not have {nd} axes",
                r.start, r.shape
            )));
        }
        if r.shape.contains(&0) {
            continue;
        }
        let strides = c_strides(&r.shape, elem);
        // Cells touched per axis.
        let lo: Vec<u64> = (0..nd).map(|k| r.start[k] / cell_shape[k]).collect();
        let hi: Vec<u64> = (0..nd)
            .map(|k| (r.start[k] + r.shape[k] - 1) / cell_shape[k])
            .collect();
        let mut cell = lo.clone();
        'cells: loop {
            let count = if single { direct.len() } else { units.len() };
            if count >= max_units && (single || !units.contains_key(&cell)) {
                return Err(Error::invalid(format!(
                    "the selection touches more than {max_units} chunks"
                )));
            }
            let mut start = Vec::with_capacity(nd);
            let mut shape = Vec::with_capacity(nd);
            let mut dst = r.offset as isize;
            for k in 0..nd {
                let c0 = cell[k] * cell_shape[k];
                let a = r.start[k].max(c0);
                let b = (r.start[k] + r.shape[k]).min(c0.saturating_add(cell_shape[k]));
                start.push(a - c0);
                shape.push(b - a);
                dst += (a - r.start[k]) as isize * strides[k];
            }
            let p = Placement {
                req,
                start,
                shape,
                dst_offset: dst as usize,
                dst_strides: strides.clone(),
            };
            if single {
                direct.push(Unit {
                    cell: cell.clone(),
                    placements: vec![p],
                });
            } else {
                units.entry(cell.clone()).or_default().push(p);
            }
            // Next cell, C order; done after the last.
            let mut k = nd;
            loop {
                if k == 0 {
                    break 'cells;
                }
                k -= 1;
                cell[k] += 1;
                if cell[k] <= hi[k] {
                    break;
                }
                cell[k] = lo[k];
            }
        }
    }
    if single {
        return Ok(direct);
    }
    Ok(units
        .into_iter()
        .map(|(cell, placements)| Unit { cell, placements })
        .collect())
}

/// Groups consecutive units into batches of at most `cap` bytes (a unit larger than
/// `cap` is a batch of its own): returns the index ranges.
pub(crate) fn batches(n: usize, unit_bytes: usize, cap: usize) -> Vec<std::ops::Range<usize>> {
    let per = (cap / unit_bytes.max(1)).max(1);
    (0..n).step_by(per).map(|a| a..(a + per).min(n)).collect()
}

/// Bytes of a C-order box of `shape`, checked for overflow.
pub(crate) fn checked_bytes(shape: &[u64], elem: usize) -> Result<usize> {
    shape
        .iter()
        .try_fold(elem, |acc, &s| {
            usize::try_from(s).ok().and_then(|s| acc.checked_mul(s))
        })
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::invalid(format!(
                "a selection of shape {shape:?} with {elem}-byte elements is too large to hold \
                 in memory"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every output element is written by exactly one placement, from the right
    /// array coordinate.
    #[test]
    fn placements_cover_each_output_element_once() {
        let array = [10u64, 7, 5];
        let cell = [4u64, 3, 5];
        let elem = 2;
        let reqs = vec![
            ReadBox {
                start: vec![1, 0, 2],
                shape: vec![8, 7, 3],
                offset: 0,
            },
            ReadBox {
                start: vec![9, 6, 0],
                shape: vec![1, 1, 5],
                offset: 8 * 7 * 3 * 2,
            },
        ];
        let total = (8 * 7 * 3 + 5) * 2;
        let units = plan(&reqs, &array, &cell, elem, 1000).unwrap();
        let mut seen = vec![None; total / elem];
        for u in &units {
            for p in &u.placements {
                let n: u64 = p.shape.iter().product();
                for lin in 0..n {
                    let mut rem = lin;
                    let mut idx = [0u64; 3];
                    for k in (0..3).rev() {
                        idx[k] = rem % p.shape[k];
                        rem /= p.shape[k];
                    }
                    let mut d = p.dst_offset as isize;
                    let mut global = [0u64; 3];
                    for k in 0..3 {
                        d += idx[k] as isize * p.dst_strides[k];
                        global[k] = u.cell[k] * cell[k] + p.start[k] + idx[k];
                    }
                    let slot = d as usize / elem;
                    assert!(seen[slot].is_none(), "written twice");
                    seen[slot] = Some(global);
                }
            }
        }
        // Box 0 in C order, then box 1.
        let mut want = Vec::new();
        for i in 1..9 {
            for j in 0..7 {
                for k in 2..5 {
                    want.push(Some([i, j, k]));
                }
            }
        }
        for k in 0..5 {
            want.push(Some([9, 6, k]));
        }
        assert_eq!(seen, want);
        // Unit (2, 2, 0) is shared by both requests: one unit, two placements.
        let shared = units.iter().find(|u| u.cell == vec![2, 2, 0]).unwrap();
        assert_eq!(shared.placements.len(), 2);
        let cells: Vec<_> = units.iter().map(|u| u.cell.clone()).collect();
        let mut sorted = cells.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(cells, sorted);
    }

    /// One box is planned without gathering per cell: the same units and placements
    /// as when the same box is asked for twice (gathered), in C order of cells.
    #[test]
    fn one_box_plans_like_gathered_boxes() {
        let (array, cell) = ([10u64, 7, 5], [4u64, 3, 2]);
        let r = ReadBox {
            start: vec![1, 2, 0],
            shape: vec![8, 5, 5],
            offset: 0,
        };
        let empty = ReadBox {
            start: vec![0, 0, 0],
            shape: vec![0, 3, 3],
            offset: 0,
        };
        let one = plan(&[r.clone(), empty], &array, &cell, 4, 1000).unwrap();
        let twice = plan(&[r.clone(), r], &array, &cell, 4, 1000).unwrap();
        assert_eq!(one.len(), 3 * 3 * 3);
        assert_eq!(one.len(), twice.len());
        for (a, b) in one.iter().zip(&twice) {
            assert_eq!(a.cell, b.cell);
            assert_eq!(a.placements.len(), 1);
            assert_eq!(a.placements[0], b.placements[0]);
        }
        // The bound on units holds on both paths.
        let big = ReadBox {
            start: vec![0, 0, 0],
            shape: vec![10, 7, 5],
            offset: 0,
        };
        assert!(plan(std::slice::from_ref(&big), &array, &cell, 4, 5).is_err());
        assert!(plan(&[big.clone(), big], &array, &cell, 4, 5).is_err());
    }

    #[test]
    fn zero_d_and_empty_and_bounds() {
        let u = plan(
            &[ReadBox {
                start: vec![],
                shape: vec![],
                offset: 0,
            }],
            &[],
            &[],
            4,
            10,
        )
        .unwrap();
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].placements[0].dst_offset, 0);
        let empty = plan(
            &[ReadBox {
                start: vec![3],
                shape: vec![0],
                offset: 0,
            }],
            &[10],
            &[4],
            1,
            10,
        )
        .unwrap();
        assert!(empty.is_empty());
        let e = plan(
            &[ReadBox {
                start: vec![0],
                shape: vec![10],
                offset: 0,
            }],
            &[10],
            &[1],
            1,
            5,
        )
        .unwrap_err();
        assert!(e.to_string().contains("more than 5"), "{e}");
    }

    #[test]
    fn batches_pack_units() {
        assert_eq!(batches(5, 10, 25), vec![0..2, 2..4, 4..5]);
        assert_eq!(batches(3, 100, 25), vec![0..1, 1..2, 2..3]);
        assert!(batches(0, 1, 1).is_empty());
    }
}
