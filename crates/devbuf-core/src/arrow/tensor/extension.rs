//! The `arrow.fixed_shape_tensor` extension type: [`TensorType`] (shape, permutation,
//! dimension names) and its JSON metadata.

use super::*;

/// The canonical `arrow.fixed_shape_tensor` extension type: an element type, the
/// physical (row-major) shape of every tensor, an optional permutation and optional
/// dimension names.
///
/// ```
/// use devbuf_core::arrow::TensorType;
/// use devbuf_core::ElementType;
/// // An F-order [2, 3, 4] array: row-major [4, 3, 2] in memory.
/// let t = TensorType::new(ElementType::Float32, &[4, 3, 2]).with_permutation(vec![2, 1, 0])?;
/// assert_eq!(t.logical_shape(), vec![2, 3, 4]);
/// assert_eq!(t.metadata(), r#"{"shape":[4,3,2],"permutation":[2,1,0]}"#);
/// let field = t.field("chunk", false)?;
/// assert_eq!(TensorType::from_field(&field)?, t);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorType {
    pub(super) element: ElementType,
    pub(super) shape: Vec<usize>,
    pub(super) permutation: Option<Vec<usize>>,
    pub(super) dim_names: Option<Vec<String>>,
}

impl TensorType {
    /// Tensors of `element` with row-major `shape`, no permutation, no names.
    pub fn new(element: ElementType, shape: &[usize]) -> TensorType {
        TensorType {
            element,
            shape: shape.to_vec(),
            permutation: None,
            dim_names: None,
        }
    }

    /// Sets the permutation (`logical_shape[i] == shape[permutation[i]]`); it must be a
    /// permutation of `0..ndim`. The identity is stored as no permutation.
    pub fn with_permutation(mut self, permutation: Vec<usize>) -> Result<TensorType> {
        check_permutation(&permutation, self.shape.len())?;
        let identity = permutation.iter().enumerate().all(|(i, &p)| i == p);
        self.permutation = (!identity).then_some(permutation);
        Ok(self)
    }

    /// Sets the dimension names (one per physical dimension, as the spec says).
    pub fn with_dim_names(mut self, names: Vec<String>) -> Result<TensorType> {
        if names.len() != self.shape.len() {
            return Err(Error::invalid(format!(
                "{} dimension names given for a {}-dimensional tensor",
                names.len(),
                self.shape.len()
            )));
        }
        self.dim_names = Some(names);
        Ok(self)
    }

    /// The element type.
    pub fn element(&self) -> ElementType {
        self.element
    }

    /// The physical shape (row-major, as stored).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The permutation, when it is not the identity.
    pub fn permutation(&self) -> Option<&[usize]> {
        self.permutation.as_deref()
    }

    /// The dimension names, when given.
    pub fn dim_names(&self) -> Option<&[String]> {
        self.dim_names.as_deref()
    }

    /// The logical shape: `shape[permutation[i]]` for each `i`.
    pub fn logical_shape(&self) -> Vec<usize> {
        match &self.permutation {
            Some(p) => p.iter().map(|&j| self.shape[j]).collect(),
            None => self.shape.clone(),
        }
    }

    /// Elements per tensor (the `FixedSizeList` size, `shape().iter().product()`); an
    /// error when it overflows.
    pub(crate) fn list_size(&self) -> Result<usize> {
        self.shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| Error::invalid(format!("tensor shape {:?} overflows", self.shape)))
    }

    /// The storage type: `FixedSizeList<item: value (not nullable), list_size>`; an
    /// error when the list size does not fit Arrow's `i32`.
    pub fn storage_type(&self) -> Result<ArrowType> {
        let n = self.list_size()?;
        let size = i32::try_from(n).map_err(|_| {
            Error::invalid(format!(
                "a tensor of shape {:?} has {n} elements, more than an Arrow FixedSizeList \
                 holds (2^31 - 1)",
                self.shape
            ))
        })?;
        Ok(fixed_list(arrow_data_type(self.element), size))
    }

    /// The extension metadata, JSON with the spec's keys: `{"shape":[..]}`, plus
    /// `"permutation"` and `"dim_names"` when set.
    pub fn metadata(&self) -> String {
        let mut s = format!("{{\"shape\":{}", json_list(&self.shape));
        if let Some(p) = &self.permutation {
            s.push_str(&format!(",\"permutation\":{}", json_list(p)));
        }
        if let Some(names) = &self.dim_names {
            let names = serde_json::Value::from(names.clone());
            s.push_str(&format!(",\"dim_names\":{names}"));
        }
        s.push('}');
        s
    }

    /// A field of the storage type tagged with this extension type
    /// (`ARROW:extension:name` and `ARROW:extension:metadata`).
    pub fn field(&self, name: &str, nullable: bool) -> Result<Field> {
        let mut md = std::collections::HashMap::new();
        md.insert(
            EXTENSION_TYPE_NAME_KEY.to_string(),
            FIXED_SHAPE_TENSOR.to_string(),
        );
        md.insert(EXTENSION_TYPE_METADATA_KEY.to_string(), self.metadata());
        Ok(Field::new(name, self.storage_type()?, nullable).with_metadata(md))
    }

    /// Reads the extension type from a field: the extension name must be
    /// `arrow.fixed_shape_tensor`, the storage a `FixedSizeList` of a supported element
    /// type (child nullability is not checked), and the metadata valid JSON whose shape
    /// has `list_size` elements. Reads `"permutation"` (the spec) and `"permutations"`
    /// (arrow-rs ≤ 60); `null` values count as absent; unknown keys are ignored.
    pub fn from_field(field: &Field) -> Result<TensorType> {
        let md = field.metadata();
        match md.get(EXTENSION_TYPE_NAME_KEY) {
            Some(n) if n == FIXED_SHAPE_TENSOR => {}
            Some(n) => {
                return Err(Error::invalid(format!(
                    "field {:?} has extension type {n:?}, not {FIXED_SHAPE_TENSOR}",
                    field.name()
                )));
            }
            None => {
                return Err(Error::invalid(format!(
                    "field {:?} ({}) is not tagged as {FIXED_SHAPE_TENSOR}",
                    field.name(),
                    field.data_type()
                )));
            }
        }
        let ArrowType::FixedSizeList(item, size) = field.data_type() else {
            return Err(Error::invalid(format!(
                "{FIXED_SHAPE_TENSOR} field {:?} has storage {}, not a FixedSizeList",
                field.name(),
                field.data_type()
            )));
        };
        let element = element_type_of(item.data_type())?;
        let json = md.get(EXTENSION_TYPE_METADATA_KEY).ok_or_else(|| {
            Error::invalid(format!(
                "{FIXED_SHAPE_TENSOR} field {:?} has no extension metadata",
                field.name()
            ))
        })?;
        let t = TensorType::parse_metadata(element, json)?;
        let n = t.list_size()?;
        if usize::try_from(*size).ok() != Some(n) {
            return Err(Error::invalid(format!(
                "{FIXED_SHAPE_TENSOR} field {:?}: shape {:?} has {n} elements, the storage \
                 FixedSizeList has {size}",
                field.name(),
                t.shape
            )));
        }
        Ok(t)
    }

    /// Parses extension metadata (see [`from_field`](Self::from_field)) for tensors of
    /// `element`.
    pub(crate) fn parse_metadata(element: ElementType, json: &str) -> Result<TensorType> {
        let bad =
            |m: String| Error::invalid(format!("{FIXED_SHAPE_TENSOR} metadata {json:?}: {m}"));
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| bad(format!("not JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad("not a JSON object".into()))?;
        let ints = |key: &str| -> Result<Option<Vec<usize>>> {
            match obj.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::Array(a)) => a
                    .iter()
                    .map(|x| {
                        x.as_u64()
                            .and_then(|u| usize::try_from(u).ok())
                            .ok_or_else(|| {
                                bad(format!("{key} holds {x}, not a non-negative integer"))
                            })
                    })
                    .collect::<Result<Vec<_>>>()
                    .map(Some),
                Some(x) => Err(bad(format!("{key} is {x}, not an array"))),
            }
        };
        let shape = ints("shape")?.ok_or_else(|| bad("no \"shape\"".into()))?;
        let perm = match (ints("permutation")?, ints("permutations")?) {
            (Some(a), Some(b)) if a != b => {
                return Err(bad("\"permutation\" and \"permutations\" differ".into()));
            }
            (a, b) => a.or(b),
        };
        let names = match obj.get("dim_names") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Array(a)) => Some(
                a.iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| bad(format!("dim_names holds {x}, not a string")))
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
            Some(x) => return Err(bad(format!("dim_names is {x}, not an array"))),
        };
        let mut t = TensorType::new(element, &shape);
        if let Some(p) = perm {
            t = t.with_permutation(p).map_err(|e| bad(e.to_string()))?;
        }
        if let Some(n) = names {
            t = t.with_dim_names(n).map_err(|e| bad(e.to_string()))?;
        }
        t.list_size()?;
        Ok(t)
    }

    /// Strides (bytes) of the logical axes of one tensor stored row-major in its
    /// physical shape.
    pub(crate) fn logical_strides(&self) -> Vec<usize> {
        let es = self.element.size();
        let nd = self.shape.len();
        let mut phys = vec![0usize; nd];
        let mut s = es;
        for j in (0..nd).rev() {
            phys[j] = s;
            s = s.saturating_mul(self.shape[j]);
        }
        match &self.permutation {
            Some(p) => p.iter().map(|&j| phys[j]).collect(),
            None => phys,
        }
    }

    /// `nrows` consecutive tensors in `mem` (exactly their bytes) as one NDBuffer of
    /// shape `[nrows, *logical_shape]` (a view; nothing is copied).
    pub(crate) fn rows_view(&self, mem: Memory, nrows: usize) -> Result<NDBuffer> {
        let list = self.list_size()?;
        let es = self.element.size();
        let mut shape = vec![nrows];
        shape.extend(self.logical_shape());
        let mut strides = vec![list.saturating_mul(es)];
        strides.extend(self.logical_strides());
        NDBuffer::from_parts(mem, Dtype::from(self.element), &shape, &strides, 0)
    }
}

pub(super) fn json_list(v: &[usize]) -> String {
    let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(","))
}

pub(super) fn check_permutation(p: &[usize], ndim: usize) -> Result<()> {
    let mut seen = vec![false; ndim];
    if p.len() != ndim
        || p.iter()
            .any(|&a| a >= ndim || std::mem::replace(&mut seen[a], true))
    {
        return Err(Error::invalid(format!(
            "{p:?} is not a permutation of the {ndim} dimensions 0..{ndim}"
        )));
    }
    Ok(())
}

pub(super) fn inverse(order: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; order.len()];
    for (j, &a) in order.iter().enumerate() {
        inv[a] = j;
    }
    inv
}
