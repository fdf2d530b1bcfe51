//! The benchmarks' data: a smooth field plus noise, quantised.

use devbuf::zarr::NDBuffer;

/// A smooth field plus noise, quantised: compresses like measured data (zstd-1 about
/// 1.4x), never all zeros.
pub fn field(rows: usize, cols: usize) -> NDBuffer {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let values = ndarray::Array2::from_shape_fn((rows, cols), |(i, j)| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let noise = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        let smooth = ((i as f32) * 0.003).sin() * 40.0 + ((j as f32) * 0.002).cos() * 25.0;
        ((smooth + noise * 8.0) * 4096.0).round() / 4096.0
    });
    NDBuffer::from_ndarray(values)
}
