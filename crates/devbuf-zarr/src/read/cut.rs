//! Where a read spread over several devices is cut: one axis of the selection into
//! consecutive parts, at chunk boundaries where there are enough chunks.

use std::ops::Range;

/// Cuts `range` (positions along an axis whose decode chunks are `cell` elements long,
/// the first starting at 0) into `n` consecutive parts that together cover it.
///
/// With at least `n` chunks (or chunk pieces at the range's ends) in the range, every
/// cut lies on a chunk boundary, so no chunk is decoded for two parts, and the parts
/// are as equal as whole chunks allow. With fewer, the cuts are even element counts
/// (a chunk cut in two is decoded for both parts); a range shorter than `n` leaves the
/// last parts empty.
pub(crate) fn cut(range: Range<u64>, cell: u64, n: usize) -> Vec<Range<u64>> {
    let n = n.max(1);
    let (start, end) = (range.start, range.end.max(range.start));
    let len = end - start;
    let cell = cell.max(1);
    // Chunk boundaries strictly inside the range: first, first + cell, ...
    let first = (start / cell + 1).saturating_mul(cell);
    let inside = if first < end {
        (end - 1 - first) / cell + 1
    } else {
        0
    };
    // Boundaries b_0 = start, b_1..=b_inside, b_(inside+1) = end: inside + 1 segments.
    let segments = inside + 1;
    let boundary = |j: u64| -> u64 {
        if j == 0 {
            start
        } else if j > inside {
            end
        } else {
            first + (j - 1) * cell
        }
    };
    let mut cuts = Vec::with_capacity(n + 1);
    cuts.push(start);
    if segments >= n as u64 {
        let mut prev = 0u64;
        for i in 1..n as u64 {
            let ideal = start as u128 + len as u128 * i as u128 / n as u128;
            // The boundary nearest the ideal cut, leaving one segment for each part
            // after this one.
            let j = if (ideal as u64) <= first {
                // Between `start` and the first boundary: the nearer one.
                if ideal as u64 - start < first.min(end) - ideal as u64 {
                    0
                } else {
                    1
                }
            } else {
                let k = (ideal as u64 - first) as u128;
                let lower = (k / cell as u128) as u64 + 1;
                let rem = (k % cell as u128) as u64;
                if rem * 2 >= cell { lower + 1 } else { lower }
            };
            let j = j.clamp(prev + 1, segments - (n as u64 - i));
            cuts.push(boundary(j));
            prev = j;
        }
    } else {
        // Rounded up: a range shorter than `n` gives its elements to the first parts.
        for i in 1..n as u64 {
            let at = start as u128 + (len as u128 * i as u128).div_ceil(n as u128);
            cuts.push(at as u64);
        }
    }
    cuts.push(end);
    cuts.windows(2).map(|w| w[0]..w[1]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(range: Range<u64>, cell: u64, n: usize) -> Vec<Range<u64>> {
        let parts = cut(range.clone(), cell, n);
        assert_eq!(parts.len(), n);
        assert_eq!(parts[0].start, range.start);
        assert_eq!(parts[n - 1].end, range.end);
        for w in parts.windows(2) {
            assert_eq!(w[0].end, w[1].start);
            assert!(w[0].start <= w[0].end);
        }
        parts
    }

    #[test]
    fn cuts_on_chunk_boundaries() {
        assert_eq!(check(0..100, 10, 2), [0..50, 50..100]);
        assert_eq!(check(0..100, 10, 4), [0..30, 30..50, 50..80, 80..100]);
        assert_eq!(check(0..100, 10, 3), [0..30, 30..70, 70..100]);
        // A selection starting and ending inside chunks: the end pieces count.
        assert_eq!(check(5..95, 10, 2), [5..50, 50..95]);
        assert_eq!(check(5..25, 10, 3), [5..10, 10..20, 20..25]);
        // One part: the whole range.
        assert_eq!(check(3..17, 4, 1), vec![3..17]);
    }

    #[test]
    fn fewer_chunks_than_parts_cut_evenly() {
        assert_eq!(check(0..100, 64, 4), [0..25, 25..50, 50..75, 75..100]);
        assert_eq!(check(0..3, 100, 4), [0..1, 1..2, 2..3, 3..3]);
        assert_eq!(check(5..6, 100, 2), [5..6, 6..6]);
        assert_eq!(check(7..7, 2, 2), [7..7, 7..7]);
    }

    #[test]
    fn every_cut_is_a_chunk_boundary_when_there_are_enough_chunks() {
        for cell in 1..12u64 {
            for start in 0..15u64 {
                for end in start..start + 60 {
                    for n in 1..6usize {
                        let parts = check(start..end, cell, n);
                        let first = (start / cell + 1) * cell;
                        let segments = if first < end {
                            (end - 1 - first) / cell + 2
                        } else {
                            1
                        };
                        if segments >= n as u64 {
                            for p in &parts[1..] {
                                assert!(
                                    p.start % cell == 0,
                                    "{start}..{end} / {cell} x{n}: {parts:?}"
                                );
                                assert!(p.start > start || n == 1);
                            }
                            assert!(
                                end == start || parts.iter().all(|p| p.end > p.start),
                                "{parts:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn parts_are_balanced_within_a_chunk() {
        for n in 2..8usize {
            let parts = check(0..1000, 10, n);
            let ideal = 1000 / n as u64;
            for p in &parts {
                let len = p.end - p.start;
                assert!(len + 10 >= ideal && len <= ideal + 20, "{n}: {parts:?}");
            }
        }
    }

    #[test]
    fn huge_ranges_do_not_overflow() {
        let parts = check(0..u64::MAX, 1 << 40, 3);
        assert!(parts.iter().all(|p| p.end > p.start));
    }
}
