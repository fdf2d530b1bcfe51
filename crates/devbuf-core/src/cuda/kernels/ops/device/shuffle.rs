//! Undoing blosc's byte shuffle on the device (`shuffle.cu`): the checks, the launch.

use super::*;

/// Where byte-shuffled blocks lie for [`unshuffle`](crate::cuda::kernels::ops::unshuffle)
/// (the same offsets in the source and the destination): `groups` groups `ustride`
/// bytes apart, each of `blocks` blocks `bstride` bytes apart, each of `n` elements of
/// `typesize` bytes, the first at byte `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShuffledBlocks {
    /// Byte offset of group 0, block 0 in both buffers.
    pub offset: usize,
    /// Groups of blocks.
    pub groups: usize,
    /// Bytes from one group to the next.
    pub ustride: usize,
    /// Blocks per group.
    pub blocks: usize,
    /// Bytes from one block to the next.
    pub bstride: usize,
    /// Elements per block.
    pub n: usize,
    /// Bytes per element.
    pub typesize: usize,
}

impl ShuffledBlocks {
    /// One past the last byte any block touches, or `None` on overflow.
    fn end(&self) -> Option<usize> {
        let last = |count: usize, stride: usize| count.checked_sub(1)?.checked_mul(stride);
        let block = self.n.checked_mul(self.typesize)?;
        self.offset
            .checked_add(last(self.groups, self.ustride)?)?
            .checked_add(last(self.blocks, self.bstride)?)?
            .checked_add(block)
    }
}

/// Turns byte-shuffled blocks of `src` into elements in `dst` (byte `j` of element
/// `i` of a block from `j * n + i` to `i * typesize + j`) with the vector kernel of
/// `shuffle.cu`. `Ok(false)`: the kernel does not apply (a type size other than 2, 4,
/// 8 or 16, `n` not a multiple of 16, an address or stride not a multiple of 16) and
/// nothing was queued: the caller uses a strided copy. Errors: blocks outside either
/// buffer, overlapping buffers, different contexts, a read-only destination.
pub(in crate::cuda::kernels::ops) fn unshuffle(
    stream: Option<&Stream>,
    src: &DeviceBuffer,
    dst: &DeviceBuffer,
    b: &ShuffledBlocks,
) -> Result<bool> {
    if b.groups == 0 || b.blocks == 0 || b.n == 0 || b.typesize == 0 {
        return Ok(true);
    }
    let end = b.end().ok_or_else(|| {
        Error::invalid(format!(
            "unshuffle: blocks {b:?} overflow the address space"
        ))
    })?;
    // Blocks that overlap would be written by several threads at once.
    let block = b.n * b.typesize; // no overflow: `end` covers it
    let span = (b.blocks - 1) * b.bstride + block;
    if (b.blocks > 1 && b.bstride < block) || (b.groups > 1 && b.ustride < span) {
        return Err(Error::invalid(format!(
            "unshuffle: blocks {b:?} overlap (a block is {block} bytes, a group {span})"
        )));
    }
    for (what, buf) in [("source", src), ("destination", dst)] {
        if end > buf.len() {
            return Err(Error::invalid(format!(
                "unshuffle: blocks {b:?} end at byte {end}, past the {what}'s {} bytes",
                buf.len()
            )));
        }
    }
    check_writable(dst, "unshuffle")?;
    let ctx = dst.context();
    if !src.context().same_as(ctx) {
        return Err(Error::invalid(
            "unshuffle: the source and destination belong to different contexts",
        ));
    }
    if ranges_overlap(
        src.address(),
        src.len() as u64,
        dst.address(),
        dst.len() as u64,
    ) {
        return Err(Error::invalid(
            "unshuffle: the source and destination overlap",
        ));
    }
    let on = On { stream };
    on.check(ctx, "unshuffle")?;
    let name = match b.typesize {
        2 => c"devbuf_unshuffle_2",
        4 => c"devbuf_unshuffle_4",
        8 => c"devbuf_unshuffle_8",
        16 => c"devbuf_unshuffle_16",
        _ => return Ok(false),
    };
    let s = src.address() + b.offset as u64;
    let d = dst.address() + b.offset as u64;
    if !b.n.is_multiple_of(16)
        || !s.is_multiple_of(16)
        || !d.is_multiple_of(16)
        || !b.ustride.is_multiple_of(16)
        || !b.bstride.is_multiple_of(16)
    {
        return Ok(false);
    }
    let mut p = UnshuffleParams {
        src: s,
        dst: d,
        groups: b.groups as u64,
        ustride: b.ustride as u64,
        blocks: b.blocks as u64,
        bstride: b.bstride as u64,
        n: b.n as u64,
    };
    // No overflow: the blocks are disjoint and inside the buffers (checked above).
    let threads = (b.groups as u64) * (b.blocks as u64) * (b.n as u64 / 16);
    // Safety: `UnshuffleParams` mirrors the kernel's parameter; every block it reads
    // and writes lies inside `src` and `dst` (checked above: `end`), which do not
    // overlap, and the addresses and strides are multiples of 16 (the vector loads and
    // stores); both buffers belong to the stream's context.
    unsafe { launch_struct(ctx, on, &SHUFFLE, name, blocks_for(threads), &mut p)? };
    on.finish(ctx, false)?;
    Ok(true)
}
