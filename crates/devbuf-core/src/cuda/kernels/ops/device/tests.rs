//! Unit tests of the device ops' host-side planning (no GPU needed).

use super::*;

/// The bytes the tables say vector k holds.
fn vector(t: &PatternVectors, k: u64) -> [u8; 16] {
    let p = (k % t.period as u64) as usize;
    std::array::from_fn(|j| t.table[4 * p + j / 4].to_le_bytes()[j % 4])
}

#[test]
fn pattern_tables_reproduce_the_fill() {
    for w in 1..=16usize {
        let pattern: Vec<u8> = (0..w as u8).map(|i| 0x10 + i).collect();
        for addr in [0x1000u64, 0x1003, 0x100f, 0x1011] {
            for count in [1usize, 2, 3, 7, 16, 33] {
                let len = w * count;
                let t = tables(addr, len, &pattern, &vec![0xff; w]);
                assert!(t.period >= 1 && t.period <= 16);
                assert_eq!(t.base % 16, 0);
                assert_eq!(t.base + t.start as u64, addr);
                assert_eq!(t.base + 16 * (t.nvec - 1) + t.end as u64, addr + len as u64);
                for i in 0..len as u64 {
                    let a = addr + i;
                    let k = (a - t.base) / 16;
                    let j = ((a - t.base) % 16) as usize;
                    assert_eq!(
                        vector(&t, k)[j],
                        pattern[i as usize % w],
                        "w {w} addr {addr:#x} count {count} byte {i}"
                    );
                }
            }
        }
    }
}

#[test]
fn equal_plans() {
    let f32z = 0.0f32.to_le_bytes();
    let num = EqualMode::Numeric { equal_nan: false };
    match equal_plan(ElementType::Float32, &f32z, num) {
        EqualPlan::Pattern { pattern, mask } => {
            assert_eq!(pattern, [0; 4]);
            assert_eq!(mask, [0xff, 0xff, 0xff, 0x7f]);
        }
        _ => panic!("zero compares masked"),
    }
    assert!(matches!(
        equal_plan(ElementType::Float32, &f32z, EqualMode::Bitwise),
        EqualPlan::Pattern { ref mask, .. } if mask == &[0xff; 4]
    ));
    let nan = f64::NAN.to_le_bytes();
    assert!(matches!(
        equal_plan(ElementType::Float64, &nan, num),
        EqualPlan::Known(false)
    ));
    assert!(matches!(
        equal_plan(
            ElementType::Float64,
            &nan,
            EqualMode::Numeric { equal_nan: true }
        ),
        EqualPlan::Pred { mode: 3, elem: 8 }
    ));
    assert!(matches!(
        equal_plan(ElementType::Bool, &[1], num),
        EqualPlan::Pred { mode: 0, elem: 1 }
    ));
    let c: Vec<u8> = [(-0.0f32).to_le_bytes(), 2.0f32.to_le_bytes()].concat();
    match equal_plan(ElementType::Complex64, &c, num) {
        EqualPlan::Pattern { pattern, mask } => {
            assert_eq!(&pattern[..4], &[0; 4]);
            assert_eq!(&pattern[4..], &2.0f32.to_le_bytes());
            assert_eq!(mask, [0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff]);
        }
        _ => panic!("complex compares masked"),
    }
}

#[test]
fn every_cast_has_a_kernel_name() {
    for s in ElementType::ALL {
        for d in ElementType::ALL {
            let name = cast_kernel(s, d).to_str().unwrap();
            assert_eq!(name, format!("devbuf_cast_{}_{}", s.short(), d.short()));
        }
    }
}
