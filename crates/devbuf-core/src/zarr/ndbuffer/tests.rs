//! Unit tests of broadcasting and formatting.

use super::*;

#[test]
fn broadcasting_rules() {
    let l = StridedLayout::contiguous(&[1, 3], 4, Order::C);
    assert_eq!(broadcast_strides(&l, &[2, 3]).unwrap(), vec![0, 4]);
    assert_eq!(broadcast_strides(&l, &[3]).unwrap(), vec![4]);
    assert_eq!(broadcast_strides(&l, &[4, 2, 3]).unwrap(), vec![0, 0, 4]);
    assert!(broadcast_strides(&l, &[2]).is_err());
    let s = StridedLayout::contiguous(&[], 4, Order::C);
    assert_eq!(broadcast_strides(&s, &[2, 2]).unwrap(), vec![0, 0]);
}

#[test]
fn display_is_zarr_like() {
    let nd = NDBuffer::from_ndarray(ndarray::arr1(&[1i32, 2, 3]));
    assert_eq!(
        nd.to_string(),
        "<NDBuffer shape=(3,) dtype=int32 host [1, 2, 3]>"
    );
    let z = NDBuffer::from_ndarray(ndarray::arr0(2.5f64));
    assert_eq!(
        z.to_string(),
        "<NDBuffer shape=() dtype=float64 host [2.5]>"
    );
}
