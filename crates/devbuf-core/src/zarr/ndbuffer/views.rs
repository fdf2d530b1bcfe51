//! New arrays ([`astype`](NDBuffer::astype), copies in a given order) and views that
//! copy nothing ([`reshape`](NDBuffer::reshape), [`squeeze`](NDBuffer::squeeze),
//! [`transpose`](NDBuffer::transpose), [`get`](NDBuffer::get)).

use super::*;

impl NDBuffer {
    // ------------------------------------------------------------------ new arrays

    /// `astype`: the values converted to `dtype` (numpy's `casting="unsafe"`; see
    /// [`Scalar::cast`]), in numpy's order `K` (the same axis order in memory). Converting
    /// to the identical data type returns this array (zero-copy; copy-on-write keeps it
    /// a value). Byte order is converted too.
    pub fn astype(&self, dtype: Dtype) -> Result<NDBuffer> {
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        // The result may need more bytes than this array (a wider type).
        let (n, nbytes) = checked_size(&self.layout.shape, dtype.element().size())?;
        if dtype.element() == self.dtype.element() {
            // Only the byte order changes.
            let mut out = self.copy_k()?;
            let len = out.nbytes();
            let width = dtype.element().swap_width();
            out.mem
                .write(|mut m| prim::byteswap(&mut m, 0, len, width))?;
            out.dtype = dtype;
            return Ok(out);
        }
        let src = self.to_dense_le()?;
        let layout = src.layout.k_compact(dtype.element().size());
        let place = self.mem.place();
        let mut mem = place.alloc(nbytes, false)?;
        let from = src.dtype.element();
        mem.write(|mut m| {
            prim::cast(
                &src.mem.view(),
                src.layout.offset,
                from,
                &mut m,
                0,
                dtype.element(),
                n,
            )?;
            if dtype.needs_swap() {
                prim::byteswap(&mut m, 0, nbytes, dtype.element().swap_width())?;
            }
            Ok(())
        })?;
        Ok(NDBuffer { mem, dtype, layout })
    }

    /// A new array with its own memory, laid out in `order`, in the same memory (host
    /// or device). numpy's `copy()` is `copy_order(Order::C)`.
    pub fn copy_order(&self, order: Order) -> Result<NDBuffer> {
        self.copy_into_layout(StridedLayout::contiguous(
            &self.layout.shape,
            self.dtype.element().size(),
            order,
        ))
    }

    /// A copy in this array's own axis order (numpy's `K`), dense.
    pub(super) fn copy_k(&self) -> Result<NDBuffer> {
        self.copy_into_layout(self.layout.k_compact(self.dtype.element().size()))
    }

    pub(super) fn copy_into_layout(&self, layout: StridedLayout) -> Result<NDBuffer> {
        let es = self.dtype.element().size();
        let mut mem = self.mem.place().alloc(self.nbytes(), false)?;
        if self.size() > 0 {
            mem.write(|mut m| {
                prim::strided_copy(
                    &self.mem.view(),
                    self.layout.offset,
                    &self.layout.istrides(),
                    &mut m,
                    layout.offset,
                    &layout.istrides(),
                    &layout.shape,
                    es,
                )
            })?;
        }
        Ok(NDBuffer {
            mem,
            dtype: self.dtype,
            layout,
        })
    }

    /// This array when it is dense, else a dense copy in its own axis order.
    pub(super) fn to_dense(&self) -> Result<NDBuffer> {
        if self
            .layout
            .dense_start(self.dtype.element().size())
            .is_some()
        {
            Ok(self.clone())
        } else {
            self.copy_k()
        }
    }

    /// A dense array of little-endian values (this array when it already is one).
    pub(super) fn to_dense_le(&self) -> Result<NDBuffer> {
        if !self.dtype.needs_swap() {
            return self.to_dense();
        }
        let mut out = self.copy_k()?;
        let len = out.nbytes();
        let width = self.dtype.element().swap_width();
        out.mem
            .write(|mut m| prim::byteswap(&mut m, 0, len, width))?;
        out.dtype = Dtype::new(self.dtype.element(), Endianness::Little);
        Ok(out)
    }

    // ------------------------------------------------------------------ views

    /// `reshape`: the same elements (taken in C order) in a new shape; one entry may be
    /// `-1` to be inferred (`reshape(&[-1])` flattens). A view when the array is
    /// C-contiguous, else a C-order copy.
    pub fn reshape(&self, shape: &[isize]) -> Result<NDBuffer> {
        let size = self.size();
        let mut infer = None;
        let mut known: usize = 1;
        for (i, &d) in shape.iter().enumerate() {
            if d == -1 {
                if infer.replace(i).is_some() {
                    return Err(Error::invalid(format!(
                        "can only specify one unknown dimension (-1) in the new shape {shape:?}"
                    )));
                }
            } else if d < 0 {
                return Err(Error::invalid(format!(
                    "negative dimension {d} in the new shape {shape:?} (only -1 is allowed)"
                )));
            } else {
                known = known
                    .checked_mul(d as usize)
                    .ok_or_else(|| Error::invalid(format!("new shape {shape:?} is too large")))?;
            }
        }
        let mut new: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
        if let Some(i) = infer {
            if known == 0 || !size.is_multiple_of(known) {
                return Err(Error::invalid(format!(
                    "cannot reshape array of size {size} into shape {shape:?}"
                )));
            }
            new[i] = size / known;
        } else if known != size {
            return Err(Error::invalid(format!(
                "cannot reshape array of size {size} into shape {shape:?}"
            )));
        }
        let src = if self.is_contiguous(Order::C) {
            self.clone()
        } else {
            self.copy_order(Order::C)?
        };
        let offset = if size == 0 { 0 } else { src.layout.offset };
        let mut layout = StridedLayout::contiguous(&new, self.dtype.element().size(), Order::C);
        layout.offset = offset;
        Ok(NDBuffer {
            mem: src.mem,
            dtype: self.dtype,
            layout,
        })
    }

    /// `squeeze(axis)`: removes the listed axes, each of which must have length 1
    /// (a view).
    pub fn squeeze(&self, axes: &[usize]) -> Result<NDBuffer> {
        let nd = self.ndim();
        for (i, &a) in axes.iter().enumerate() {
            if a >= nd {
                return Err(Error::invalid(format!(
                    "axis {a} is out of bounds for an array of {nd} dimension(s)"
                )));
            }
            if self.layout.shape[a] != 1 {
                return Err(Error::invalid(format!(
                    "cannot squeeze axis {a}: it has length {}, not 1",
                    self.layout.shape[a]
                )));
            }
            if axes[..i].contains(&a) {
                return Err(Error::invalid(format!("repeated axis {a} in squeeze")));
            }
        }
        let keep = |(i, _): &(usize, &usize)| !axes.contains(i);
        let layout = StridedLayout {
            shape: self
                .layout
                .shape
                .iter()
                .enumerate()
                .filter(keep)
                .map(|(_, &v)| v)
                .collect(),
            strides: self
                .layout
                .strides
                .iter()
                .enumerate()
                .filter(keep)
                .map(|(_, &v)| v)
                .collect(),
            offset: self.layout.offset,
        };
        Ok(NDBuffer {
            mem: self.mem.clone(),
            dtype: self.dtype,
            layout,
        })
    }

    /// `transpose(axes)`: permutes the axes (a view); `None` reverses them.
    pub fn transpose(&self, axes: Option<&[usize]>) -> Result<NDBuffer> {
        let nd = self.ndim();
        let perm: Vec<usize> = match axes {
            None => (0..nd).rev().collect(),
            Some(a) => a.to_vec(),
        };
        let mut seen = vec![false; nd];
        if perm.len() != nd
            || perm
                .iter()
                .any(|&a| a >= nd || std::mem::replace(&mut seen[a], true))
        {
            return Err(Error::invalid(format!(
                "axes {perm:?} are not a permutation of the {nd} axes 0..{nd}"
            )));
        }
        let layout = StridedLayout {
            shape: perm.iter().map(|&a| self.layout.shape[a]).collect(),
            strides: perm.iter().map(|&a| self.layout.strides[a]).collect(),
            offset: self.layout.offset,
        };
        Ok(NDBuffer {
            mem: self.mem.clone(),
            dtype: self.dtype,
            layout,
        })
    }

    pub(super) fn view_of(&self, sel: &[Resolved]) -> StridedLayout {
        let mut layout = StridedLayout {
            shape: Vec::new(),
            strides: Vec::new(),
            offset: self.layout.offset,
        };
        // For a non-empty array every element of the view lies inside the memory
        // (`check_fits`), so these products and sums cannot overflow. An empty array may
        // carry any strides (numpy allows that, and so does `from_parts`): there they
        // wrap, and the view, empty too, gets offset 0 below.
        for (r, &s) in sel.iter().zip(&self.layout.strides) {
            match *r {
                Resolved::Index(i) => layout.offset = layout.offset.wrapping_add(i.wrapping_mul(s)),
                Resolved::Range { start, count, step } => {
                    if count > 0 {
                        layout.offset = layout.offset.wrapping_add(start.wrapping_mul(s));
                    }
                    layout.shape.push(count);
                    // With fewer than two elements the stride is never used, and a step
                    // far beyond the axis would overflow it.
                    layout
                        .strides
                        .push(if count > 1 { s.wrapping_mul(step) } else { s });
                }
            }
        }
        if layout.size() == 0 {
            layout.offset = 0;
        }
        layout
    }

    /// `buffer[selection]`: a view (zero-copy). Per axis: an integer (drops the axis),
    /// a range or [`Slice`](crate::zarr::Slice) with a positive step, or the full axis;
    /// missing trailing selectors mean full axes. Result shapes follow numpy;
    /// out-of-range indices are errors.
    pub fn get(&self, selection: &[AxisSel]) -> Result<NDBuffer> {
        let sel = resolve(selection, &self.layout.shape)?;
        Ok(NDBuffer {
            mem: self.mem.clone(),
            dtype: self.dtype,
            layout: self.view_of(&sel),
        })
    }
}
