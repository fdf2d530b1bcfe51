//! Writes ([`set`](NDBuffer::set), [`set_scalar`](NDBuffer::set_scalar) (a fill with
//! no selectors), copy-on-write) and comparison
//! ([`all_equal`](NDBuffer::all_equal)).

use super::*;

impl NDBuffer {
    // ------------------------------------------------------------------ writes

    /// Makes the memory this array's own before a write (copy-on-write).
    pub(super) fn make_exclusive(&mut self) -> Result<()> {
        if !self.mem.is_exclusive() {
            *self = self.copy_k()?;
        }
        Ok(())
    }

    /// `buffer[selection] = value` for an array `value` (host or device, any data
    /// type): `value` is broadcast to the selection's shape as numpy does, converted to
    /// this array's data type, and moved to this array's memory first (host values go
    /// to the device and are converted there).
    pub fn set(&mut self, selection: &[AxisSel], value: &NDBuffer) -> Result<()> {
        let sel = resolve(selection, &self.layout.shape)?;
        let target = self.view_of(&sel);
        broadcast_strides(&value.layout, &target.shape)?;
        if target.size() == 0 {
            return Ok(());
        }
        let v = value.to_place(&self.mem.place())?;
        if v.dtype != self.dtype && self.cast_into(&sel, &v)? {
            return Ok(());
        }
        let v = v.astype(self.dtype)?;
        self.make_exclusive()?;
        let target = self.view_of(&sel);
        let src_strides = broadcast_strides(&v.layout, &target.shape)?;
        let es = self.dtype.element().size();
        self.mem.write(|mut m| {
            prim::strided_copy(
                &v.mem.view(),
                v.layout.offset,
                &src_strides,
                &mut m,
                target.offset,
                &target.istrides(),
                &target.shape,
                es,
            )
        })
    }

    /// The fast path of [`set`](Self::set) for a value of another data type: when the
    /// value (already in this memory) and the selection are both dense, little-endian
    /// and in the same axis order, the value is cast straight into place (no
    /// temporary). Returns whether it applied.
    pub(super) fn cast_into(&mut self, sel: &[Resolved], v: &NDBuffer) -> Result<bool> {
        let (es, ves) = (self.dtype.element().size(), v.dtype.element().size());
        let target = self.view_of(sel);
        let same_order = |t: &StridedLayout| {
            (0..t.ndim()).all(|a| t.shape[a] <= 1 || t.strides[a] / es == v.layout.strides[a] / ves)
        };
        if self.dtype.needs_swap()
            || v.dtype.needs_swap()
            || v.layout.shape != target.shape
            || v.layout.dense_start(ves).is_none()
            || target.dense_start(es).is_none()
            || !same_order(&target)
        {
            return Ok(false);
        }
        self.make_exclusive()?;
        let target = self.view_of(sel);
        if target.dense_start(es).is_none() || !same_order(&target) {
            // The copy-on-write copy changed the layout; take the general path.
            return Ok(false);
        }
        let (from, to, n) = (v.dtype.element(), self.dtype.element(), target.size());
        self.mem.write(|mut m| {
            prim::cast(
                &v.mem.view(),
                v.layout.offset,
                from,
                &mut m,
                target.offset,
                to,
                n,
            )
        })?;
        Ok(true)
    }

    /// `buffer[selection] = scalar`: every selected element becomes `value` (converted
    /// to the data type as numpy's unsafe cast does). zarr-python's `fill(value)` is
    /// `set_scalar(&[], value)` (no selectors: the whole array).
    pub fn set_scalar(&mut self, selection: &[AxisSel], value: Scalar) -> Result<()> {
        let sel = resolve(selection, &self.layout.shape)?;
        if self.view_of(&sel).size() == 0 {
            return Ok(());
        }
        let pattern = value.to_bytes_as(self.dtype);
        self.make_exclusive()?;
        let target = self.view_of(&sel);
        let es = self.dtype.element().size();
        let n = target.size();
        self.mem.write(|mut m| {
            if let Some(start) = target.dense_start(es) {
                return prim::fill(&mut m, start, n * es, &pattern);
            }
            let zeros = vec![0isize; target.ndim()];
            let tiny;
            let src = match &m {
                MemMut::Host(_) => MemRef::Host(&pattern),
                MemMut::Device(d) => {
                    tiny = DeviceBuffer::from_slice(d.context(), &pattern)?;
                    MemRef::Device(&tiny)
                }
            };
            prim::strided_copy(
                &src,
                0,
                &zeros,
                &mut m,
                target.offset,
                &target.istrides(),
                &target.shape,
                es,
            )
        })
    }

    // ------------------------------------------------------------------ comparison

    /// `all_equal(other, equal_nan)`, zarr's rules exactly:
    ///
    /// * `None` (a zarr v2 fill value of null) is never equal: `false`.
    /// * A float `other` equal to zero (`0.0` or `-0.0`) is converted to this data type
    ///   and compared **bit for bit**, so `-0.0` data is not equal to a `0.0` fill.
    /// * Otherwise numpy's `array_equal(data, other, equal_nan)`: both are compared in
    ///   their promoted type ([`promote_types`]), NaN equals NaN only with `equal_nan`
    ///   (complex: a NaN in either part makes the number NaN).
    /// * An empty array is equal to anything but `None`.
    ///
    /// Data of every memory and byte order is compared where it lives, on the device
    /// by a reduction kernel.
    ///
    /// ```
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, NDBuffer, Order, Scalar};
    /// let p = BufferPrototype::Host;
    /// let z = NDBuffer::create(&p, &[3], Dtype::FLOAT32, Order::C, Some(Scalar::from(-0.0f32)))?;
    /// assert!(!z.all_equal(Some(Scalar::from(0.0f32)), true)?); // bit patterns differ
    /// assert!(z.all_equal(Some(Scalar::from(-0.0f64)), true)?);
    /// assert!(z.all_equal(Some(Scalar::from(0i32)), true)?);     // not a float: numeric
    /// assert!(!z.all_equal(None, true)?);
    /// let n = NDBuffer::create(&p, &[2], Dtype::FLOAT64, Order::C, Some(Scalar::from(f64::NAN)))?;
    /// assert!(n.all_equal(Some(Scalar::from(f64::NAN)), true)?);
    /// assert!(!n.all_equal(Some(Scalar::from(f64::NAN)), false)?);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn all_equal(&self, other: Option<Scalar>, equal_nan: bool) -> Result<bool> {
        let Some(other) = other else {
            return Ok(false);
        };
        if self.size() == 0 {
            return Ok(true);
        }
        let data = self.dtype.element();
        if other.is_float_zero() {
            return self.compare_stored(&other.to_bytes_as(self.dtype), EqualMode::Bitwise);
        }
        let common = promote_types(data, other.element_type());
        let t = other.cast(common);
        let lossy = matches!(data, ElementType::Int64 | ElementType::UInt64)
            && (common.is_float() || common.is_complex());
        if lossy {
            // numpy compares in the promoted float type, where distinct 64-bit integers
            // can become equal: convert the data to it first.
            let promoted = self.astype(Dtype::new(common, Endianness::Little))?;
            return promoted.compare_le(&t.to_le_bytes(), EqualMode::Numeric { equal_nan });
        }
        if t.is_nan() {
            if !equal_nan || !(data.is_float() || data.is_complex()) {
                return Ok(false);
            }
            let nan = Scalar::Float64(f64::NAN).cast(data);
            return self.compare_le_values(nan, EqualMode::Numeric { equal_nan: true });
        }
        // The data's type holds every value exactly in the promoted type, so an element
        // equals `t` exactly when it equals the one value `d` of its own type that
        // converts to `t`; when no such value exists, nothing is equal.
        let d = t.cast(data);
        let back = d.cast(common);
        let same = match (back, t) {
            (Scalar::Complex64(a), Scalar::Complex64(b)) => a == b,
            (Scalar::Complex128(a), Scalar::Complex128(b)) => a == b,
            (a, b) => host_ops::all_equal(
                &a.to_le_bytes(),
                common,
                &b.to_le_bytes(),
                EqualMode::Numeric { equal_nan: false },
            )
            .unwrap_or(false),
        };
        if !same {
            return Ok(false);
        }
        self.compare_le_values(d, EqualMode::Numeric { equal_nan })
    }

    /// Compares every element with the value `d` (of the data's element type).
    /// Where value equality is bit equality (integers; floats and complex numbers with
    /// no zero or NaN part) the stored bytes are compared as they are (no byte swap);
    /// otherwise the values are compared numerically on little-endian data.
    pub(super) fn compare_le_values(&self, d: Scalar, mode: EqualMode) -> Result<bool> {
        let plain = |x: f64| x != 0.0 && !x.is_nan();
        let bitwise_ok = match d {
            Scalar::Bool(_) => false,
            Scalar::Float16(v) => plain(v.to_f64()),
            Scalar::Float32(v) => plain(v as f64),
            Scalar::Float64(v) => plain(v),
            Scalar::Complex64(v) => plain(v.re as f64) && plain(v.im as f64),
            Scalar::Complex128(v) => plain(v.re) && plain(v.im),
            _ => true,
        };
        if bitwise_ok {
            self.compare_stored(&d.to_bytes_as(self.dtype), EqualMode::Bitwise)
        } else {
            self.compare_le(&d.to_le_bytes(), mode)
        }
    }

    /// Compares the stored bytes (in the data's own byte order) with `stored`.
    pub(super) fn compare_stored(&self, stored: &[u8], mode: EqualMode) -> Result<bool> {
        let dense = self.to_dense()?;
        prim::all_equal(
            &dense.mem.view(),
            dense.layout.offset,
            self.nbytes(),
            self.dtype.element(),
            stored,
            mode,
        )
    }

    /// Compares the values (made little-endian) with the little-endian `value`.
    pub(super) fn compare_le(&self, value: &[u8], mode: EqualMode) -> Result<bool> {
        let dense = self.to_dense_le()?;
        prim::all_equal(
            &dense.mem.view(),
            dense.layout.offset,
            self.nbytes(),
            self.dtype.element(),
            value,
            mode,
        )
    }
}
