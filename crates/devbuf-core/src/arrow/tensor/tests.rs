//! Unit tests of the tensor conversions' layout analysis and metadata.

use super::*;

#[test]
fn dense_orders() {
    // C, F, a transposition, a strided view.
    assert_eq!(
        dense_order(&[2, 3, 4], &[48, 16, 4], 4),
        Some(vec![0, 1, 2])
    );
    assert_eq!(dense_order(&[2, 3, 4], &[4, 8, 24], 4), Some(vec![2, 1, 0]));
    assert_eq!(
        dense_order(&[2, 3, 4], &[12, 4, 24], 4),
        Some(vec![2, 0, 1])
    );
    assert_eq!(dense_order(&[2, 3, 4], &[96, 32, 8], 4), None);
    // Unit axes do not count; empty arrays are C.
    assert_eq!(dense_order(&[1, 3, 1], &[0, 4, 99], 4), Some(vec![0, 1, 2]));
    assert_eq!(dense_order(&[0, 3], &[4, 8], 4), Some(vec![0, 1]));
    assert_eq!(dense_order(&[], &[], 4), Some(vec![]));
}

#[test]
fn permutation_is_the_inverse_of_the_memory_order() {
    // Logical [2, 3, 4] stored with axis 2 outermost, then 0, then 1.
    let order = vec![2, 0, 1];
    let phys: Vec<usize> = order.iter().map(|&a| [2, 3, 4][a]).collect();
    let t = TensorType::new(ElementType::Int8, &phys)
        .with_permutation(inverse(&order))
        .unwrap();
    assert_eq!(t.shape(), &[4, 2, 3]);
    assert_eq!(t.permutation(), Some(&[1, 2, 0][..]));
    assert_eq!(t.logical_shape(), vec![2, 3, 4]);
    // Logical strides: axis 0 -> 3, axis 1 -> 1, axis 2 -> 6 elements.
    assert_eq!(t.logical_strides(), vec![3, 1, 6]);
}
