//! What a Flight request names, and the tickets of endpoints: parsed strictly, with
//! bounded sizes, and errors that say what was wrong and what is valid.
//!
//! * A **descriptor** names a [`Target`]: the path `["zarr", <components>...]` is the
//!   zarr array at that path under the server's root (components may also be joined
//!   with `/` in one segment: `["zarr", "group/a.zarr"]`), `["batch", <name>]` a
//!   registered record batch. A command descriptor carries a [`Query`] as JSON —
//!   `{"v":1,"array":"group/a.zarr","selection":[[0,100],[20,40]],"endpoints":4}` or
//!   `{"v":1,"batch":"name"}` — to ask for part of an array (a box of element ranges)
//!   or a number of endpoints.
//! * A **ticket** is a [`Part`] as JSON: `{"v":1,"array":"a.zarr","start":[0,0],
//!   "end":[3,2],"range":[0,4]}` (chunks `range` — linear, C order — of the chunk-grid
//!   box `start..end`) or `{"v":1,"batch":"name","range":[0,2]}` (the stored batches
//!   `range` of a registered name). Standard Flight clients pass tickets through
//!   unchanged; devbuf's client reads them to check that every chunk arrived.
//!
//! Documents are at most [`MAX_TICKET_BYTES`] bytes, objects with exactly the keys
//! above, numbers are non-negative integers; a path has at most
//! [`MAX_PATH_COMPONENTS`] components of at most [`MAX_COMPONENT_BYTES`] bytes, none
//! empty, `.` or `..`, none with `\`, NUL or control characters.
//!
//! Only [`Target`] and [`Query`] are API (re-exported at the crate root): tickets are
//! opaque to clients. The rest is the wire format, reachable by the workspace's tests
//! through `devbuf::__test::flight::ticket` (feature `test-support`); the examples of
//! its items are the unit tests below (`wire_format_examples`).

use std::ops::Range;

use arrow_flight::FlightDescriptor;
use arrow_flight::flight_descriptor::DescriptorType;
use serde_json::{Map, Value};

use devbuf_core::error::{Error, Result};

/// Largest ticket, command or action body accepted, in bytes.
pub const MAX_TICKET_BYTES: usize = 4096;
/// Most components of an array path.
pub const MAX_PATH_COMPONENTS: usize = 32;
/// Longest component of an array path, in bytes.
pub const MAX_COMPONENT_BYTES: usize = 255;
/// Longest batch name, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Most endpoints a query may ask for.
pub const MAX_ENDPOINTS: usize = 1024;
/// Most dimensions of a chunk grid in a ticket (zarr arrays have at most
/// [`MAX_RANK`](devbuf_zarr::MAX_RANK)).
pub const MAX_TICKET_RANK: usize = 64;

/// The first descriptor path segment of zarr arrays.
pub const ARRAY_KIND: &str = "zarr";
/// The first descriptor path segment of registered batches.
pub const BATCH_KIND: &str = "batch";

fn bad(msg: impl std::fmt::Display) -> Error {
    Error::invalid(msg)
}

/// Checks an array path (relative to the server's root) and returns it normalised:
/// components joined by `/`.
pub fn array_path(path: &str) -> Result<String> {
    let shown = preview(path);
    if path.is_empty() {
        return Err(bad(
            "empty array path (give a path relative to the server's root)",
        ));
    }
    if path.starts_with('/') {
        return Err(bad(format!(
            "array path {shown} is absolute: give a path relative to the server's root"
        )));
    }
    let components: Vec<&str> = path.split('/').collect();
    if components.len() > MAX_PATH_COMPONENTS {
        return Err(bad(format!(
            "array path {shown} has {} components (at most {MAX_PATH_COMPONENTS})",
            components.len()
        )));
    }
    for c in &components {
        component(c, &shown)?;
    }
    Ok(components.join("/"))
}

fn component(c: &str, shown: &str) -> Result<()> {
    if c.is_empty() {
        return Err(bad(format!(
            "array path {shown} has an empty component (no leading, trailing or double '/')"
        )));
    }
    if c == "." || c == ".." {
        return Err(bad(format!(
            "array path {shown}: the component {c:?} is not allowed (paths stay inside the \
             server's root)"
        )));
    }
    if c.len() > MAX_COMPONENT_BYTES {
        return Err(bad(format!(
            "array path {shown}: a component of {} bytes (at most {MAX_COMPONENT_BYTES})",
            c.len()
        )));
    }
    if let Some(ch) = c.chars().find(|&ch| ch == '\\' || ch.is_control()) {
        return Err(bad(format!(
            "array path {shown}: the character {ch:?} is not allowed in a component"
        )));
    }
    Ok(())
}

/// Checks a batch name: 1 to [`MAX_NAME_BYTES`] bytes of ASCII letters, digits, `.`,
/// `_` and `-`, not starting with `.`.
pub fn batch_name(name: &str) -> Result<String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        return Err(bad(format!(
            "invalid batch name {}: use 1 to {MAX_NAME_BYTES} ASCII letters, digits, '.', '_' \
             or '-', not starting with '.'",
            preview(name)
        )));
    }
    Ok(name.to_string())
}

/// A quoted, shortened rendering of untrusted text for messages.
pub(crate) fn preview(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() <= MAX {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head:?}... ({} bytes)", s.len())
    }
}

/// What a descriptor names: a zarr array under the server's root, or a registered
/// record batch.
///
/// ```
/// use devbuf_flight::{Query, Target};
/// let t = Target::array("group/a.zarr")?;
/// assert_eq!(Query::whole(t).descriptor().path, vec!["zarr", "group", "a.zarr"]);
/// assert!(Target::array("../x").is_err());
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// A zarr array: its path under the root, components joined by `/`.
    Array(String),
    /// A registered record batch, by name.
    Batch(String),
}

impl Target {
    /// The array at `path`, relative to the server's root: at most 32 components of at
    /// most 255 bytes, joined by `/`, none empty, `.` or `..`, none with `\`, NUL or
    /// control characters (an error says what was wrong).
    pub fn array(path: &str) -> Result<Target> {
        Ok(Target::Array(array_path(path)?))
    }

    /// The registered batch `name`: 1 to 128 bytes of ASCII letters, digits, `.`, `_`
    /// and `-`, not starting with `.` (an error says what was wrong).
    pub fn batch(name: &str) -> Result<Target> {
        Ok(Target::Batch(batch_name(name)?))
    }

    /// The descriptor path: `["zarr", components...]` or `["batch", name]`.
    pub(crate) fn path_segments(&self) -> Vec<String> {
        match self {
            Target::Array(p) => std::iter::once(ARRAY_KIND.to_string())
                .chain(p.split('/').map(str::to_string))
                .collect(),
            Target::Batch(n) => vec![BATCH_KIND.to_string(), n.clone()],
        }
    }

    /// Parses a descriptor path.
    pub(crate) fn from_segments(segments: &[String]) -> Result<Target> {
        if segments.len() > MAX_PATH_COMPONENTS + 1 {
            return Err(bad(format!(
                "descriptor path of {} segments (at most {})",
                segments.len(),
                MAX_PATH_COMPONENTS + 1
            )));
        }
        match segments {
            [kind, rest @ ..] if kind == ARRAY_KIND && !rest.is_empty() => {
                if rest.iter().map(|s| s.len() + 1).sum::<usize>()
                    > MAX_PATH_COMPONENTS * (MAX_COMPONENT_BYTES + 1)
                {
                    return Err(bad("descriptor path too long"));
                }
                Target::array(&rest.join("/"))
            }
            [kind, name] if kind == BATCH_KIND => Target::batch(name),
            _ => Err(bad(format!(
                "descriptor path {:?}: expected [\"{ARRAY_KIND}\", <path under the root>...] \
                 or [\"{BATCH_KIND}\", <name>]",
                segments
                    .iter()
                    .take(4)
                    .map(|s| preview(s))
                    .collect::<Vec<_>>()
            ))),
        }
    }

    /// A path descriptor of this target (`Query::whole(target).descriptor()`).
    pub(crate) fn descriptor(&self) -> FlightDescriptor {
        FlightDescriptor::new_path(self.path_segments())
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Array(p) => write!(f, "array {p}"),
            Target::Batch(n) => write!(f, "batch {n}"),
        }
    }
}

/// A `GetFlightInfo` request: a target, for an array optionally a box of element ranges
/// (`start..end` per axis), and optionally how many endpoints to cut it into.
///
/// ```
/// use devbuf_flight::{Query, Target};
/// let q = Query { target: Target::array("a.zarr")?, selection: Some(vec![0..10, 5..6]), endpoints: Some(3) };
/// let d = q.descriptor(); // a command descriptor (JSON): what Client::info sends
/// let cmd = std::str::from_utf8(&d.cmd).unwrap();
/// assert!(cmd.contains(r#""array":"a.zarr""#) && cmd.contains(r#""selection":[[0,10],[5,6]]"#));
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// What is asked for.
    pub target: Target,
    /// For arrays: the box to read (the whole array when `None`).
    pub selection: Option<Vec<Range<u64>>>,
    /// How many endpoints to cut the flight into (the server's default when `None`;
    /// 1 to 1024).
    pub endpoints: Option<usize>,
}

impl Query {
    /// A query for the whole target with the server's number of endpoints.
    pub fn whole(target: Target) -> Query {
        Query {
            target,
            selection: None,
            endpoints: None,
        }
    }

    /// The descriptor: a path descriptor when nothing but the target is asked for,
    /// else a command descriptor.
    pub fn descriptor(&self) -> FlightDescriptor {
        if self.selection.is_none() && self.endpoints.is_none() {
            return self.target.descriptor();
        }
        let mut m = Map::new();
        m.insert("v".into(), Value::from(1));
        match &self.target {
            Target::Array(p) => m.insert("array".into(), Value::from(p.as_str())),
            Target::Batch(n) => m.insert("batch".into(), Value::from(n.as_str())),
        };
        if let Some(sel) = &self.selection {
            m.insert(
                "selection".into(),
                Value::Array(
                    sel.iter()
                        .map(|r| Value::from(vec![r.start, r.end]))
                        .collect(),
                ),
            );
        }
        if let Some(n) = self.endpoints {
            m.insert("endpoints".into(), Value::from(n));
        }
        FlightDescriptor::new_cmd(Value::Object(m).to_string())
    }

    /// Parses a descriptor (path or command).
    pub(crate) fn from_descriptor(d: &FlightDescriptor) -> Result<Query> {
        match DescriptorType::try_from(d.r#type) {
            Ok(DescriptorType::Path) => Ok(Query::whole(Target::from_segments(&d.path)?)),
            Ok(DescriptorType::Cmd) => Query::from_command(&d.cmd),
            _ => Err(bad(format!(
                "descriptor type {} is not PATH (1) or CMD (2)",
                d.r#type
            ))),
        }
    }

    fn from_command(cmd: &[u8]) -> Result<Query> {
        let m = object(
            cmd,
            "command",
            &["v", "array", "batch", "selection", "endpoints"],
        )?;
        let target = target_of(&m, "command")?;
        let selection = match m.get("selection") {
            None => None,
            Some(v) => {
                if !matches!(target, Target::Array(_)) {
                    return Err(bad("command: a selection applies to arrays only"));
                }
                let axes = v
                    .as_array()
                    .ok_or_else(|| bad("command: \"selection\" must be a list of [start, end]"))?;
                if axes.len() > MAX_TICKET_RANK {
                    return Err(bad(format!(
                        "command: a selection of {} axes (at most {MAX_TICKET_RANK})",
                        axes.len()
                    )));
                }
                Some(
                    axes.iter()
                        .map(|a| pair(a, "command: a selection axis"))
                        .collect::<Result<Vec<_>>>()?,
                )
            }
        };
        let endpoints = match m.get("endpoints") {
            None => None,
            Some(v) => {
                let n = v
                    .as_u64()
                    .filter(|&n| (1..=MAX_ENDPOINTS as u64).contains(&n))
                    .ok_or_else(|| {
                        bad(format!(
                            "command: \"endpoints\" is {v}, expected 1 to {MAX_ENDPOINTS}"
                        ))
                    })?;
                Some(n as usize)
            }
        };
        Ok(Query {
            target,
            selection,
            endpoints,
        })
    }
}

/// A box of the chunk grid: chunk indices `start[d]..end[d]` per axis, walked in C order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkRegion {
    start: Vec<u64>,
    end: Vec<u64>,
    len: u64,
}

impl ChunkRegion {
    /// The box `start..end` (per axis `start <= end`; at most [`MAX_TICKET_RANK`]
    /// axes; at most `u64::MAX` chunks).
    pub fn new(start: Vec<u64>, end: Vec<u64>) -> Result<ChunkRegion> {
        if start.len() != end.len() || start.len() > MAX_TICKET_RANK {
            return Err(bad(format!(
                "chunk region {start:?}..{end:?}: start and end need the same number of axes \
                 (at most {MAX_TICKET_RANK})"
            )));
        }
        let mut len = 1u64;
        for (s, e) in start.iter().zip(&end) {
            if s > e {
                return Err(bad(format!(
                    "chunk region {start:?}..{end:?}: start exceeds end on an axis"
                )));
            }
            len = len
                .checked_mul(e - s)
                .ok_or_else(|| bad(format!("chunk region {start:?}..{end:?} is too large")))?;
        }
        Ok(ChunkRegion { start, end, len })
    }

    /// First chunk index per axis.
    pub fn start(&self) -> &[u64] {
        &self.start
    }

    /// One past the last chunk index per axis.
    pub fn end(&self) -> &[u64] {
        &self.end
    }

    /// Number of chunks.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the box holds no chunk.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk indices of the `linear`-th chunk (C order); an error past the end.
    pub fn coords(&self, linear: u64) -> Result<Vec<u64>> {
        if linear >= self.len {
            return Err(bad(format!(
                "chunk {linear} of a region of {} chunks",
                self.len
            )));
        }
        let mut rem = linear;
        let mut out = vec![0u64; self.start.len()];
        for d in (0..self.start.len()).rev() {
            let n = self.end[d] - self.start[d];
            out[d] = self.start[d] + rem % n;
            rem /= n;
        }
        Ok(out)
    }

    /// The linear (C-order) position of chunk `coords`, `None` outside the box.
    pub fn linear(&self, coords: &[u64]) -> Option<u64> {
        if coords.len() != self.start.len() {
            return None;
        }
        let mut lin = 0u64;
        for ((&c, &s), &e) in coords.iter().zip(&self.start).zip(&self.end) {
            if c < s || c >= e {
                return None;
            }
            lin = lin * (e - s) + (c - s);
        }
        Some(lin)
    }
}

/// One endpoint's part of a flight: what its ticket names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Chunks `range` (linear, C order) of `region` of the array at `array`.
    Chunks {
        /// The array's path under the root.
        array: String,
        /// The chunk-grid box.
        region: ChunkRegion,
        /// Which of the region's chunks.
        range: Range<u64>,
    },
    /// Stored batches `range` of the registered name `name`.
    Batches {
        /// The registered name.
        name: String,
        /// Which of its batches.
        range: Range<u64>,
    },
}

impl Part {
    /// The ticket bytes (JSON).
    pub fn encode(&self) -> Vec<u8> {
        let mut m = Map::new();
        m.insert("v".into(), Value::from(1));
        match self {
            Part::Chunks {
                array,
                region,
                range,
            } => {
                m.insert("array".into(), Value::from(array.as_str()));
                m.insert("start".into(), Value::from(region.start.clone()));
                m.insert("end".into(), Value::from(region.end.clone()));
                m.insert("range".into(), Value::from(vec![range.start, range.end]));
            }
            Part::Batches { name, range } => {
                m.insert("batch".into(), Value::from(name.as_str()));
                m.insert("range".into(), Value::from(vec![range.start, range.end]));
            }
        }
        Value::Object(m).to_string().into_bytes()
    }

    /// Parses ticket bytes strictly (see the [module docs](self)).
    pub fn decode(bytes: &[u8]) -> Result<Part> {
        let m = object(
            bytes,
            "ticket",
            &["v", "array", "batch", "start", "end", "range"],
        )?;
        let range = pair(
            m.get("range")
                .ok_or_else(|| bad("ticket: no \"range\" ([first, end])"))?,
            "ticket: \"range\"",
        )?;
        match target_of(&m, "ticket")? {
            Target::Array(array) => {
                let axes = |key: &str| -> Result<Vec<u64>> {
                    let v = m.get(key).and_then(Value::as_array).ok_or_else(|| {
                        bad(format!("ticket: no \"{key}\" list of chunk indices"))
                    })?;
                    if v.len() > MAX_TICKET_RANK {
                        return Err(bad(format!(
                            "ticket: \"{key}\" has {} axes (at most {MAX_TICKET_RANK})",
                            v.len()
                        )));
                    }
                    v.iter()
                        .map(|x| {
                            x.as_u64().ok_or_else(|| {
                                bad(format!(
                                    "ticket: \"{key}\" holds {x}, not a non-negative integer"
                                ))
                            })
                        })
                        .collect()
                };
                let region = ChunkRegion::new(axes("start")?, axes("end")?)?;
                if range.end > region.len() {
                    return Err(bad(format!(
                        "ticket: range {}..{} exceeds the region's {} chunks",
                        range.start,
                        range.end,
                        region.len()
                    )));
                }
                Ok(Part::Chunks {
                    array,
                    region,
                    range,
                })
            }
            Target::Batch(name) => {
                if m.contains_key("start") || m.contains_key("end") {
                    return Err(bad("ticket: \"start\"/\"end\" apply to arrays only"));
                }
                Ok(Part::Batches { name, range })
            }
        }
    }
}

/// A JSON object of at most [`MAX_TICKET_BYTES`] with only the `allowed` keys and
/// `"v": 1`.
fn object(bytes: &[u8], what: &str, allowed: &[&str]) -> Result<Map<String, Value>> {
    if bytes.len() > MAX_TICKET_BYTES {
        return Err(bad(format!(
            "{what} of {} bytes (at most {MAX_TICKET_BYTES})",
            bytes.len()
        )));
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        bad(format!(
            "{what} is not a devbuf Flight {what} (JSON: {e}); {what}s come from GetFlightInfo"
        ))
    })?;
    let Value::Object(m) = v else {
        return Err(bad(format!("{what} is JSON but not an object")));
    };
    if let Some(k) = m.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(format!(
            "{what}: unknown key {} (allowed: {allowed:?})",
            preview(k)
        )));
    }
    match m.get("v").and_then(Value::as_u64) {
        Some(1) => Ok(m),
        _ => Err(bad(format!("{what}: \"v\" must be 1 (the format version)"))),
    }
}

/// The target of a command or ticket: exactly one of `"array"` and `"batch"`.
fn target_of(m: &Map<String, Value>, what: &str) -> Result<Target> {
    let text = |k: &str| -> Result<Option<&str>> {
        match m.get(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(bad(format!("{what}: \"{k}\" is {v}, not a string"))),
        }
    };
    match (text("array")?, text("batch")?) {
        (Some(a), None) => Target::array(a),
        (None, Some(b)) => Target::batch(b),
        _ => Err(bad(format!(
            "{what}: give exactly one of \"array\" (a path under the root) and \"batch\" (a name)"
        ))),
    }
}

/// `[a, b]` with `a <= b`.
fn pair(v: &Value, what: &str) -> Result<Range<u64>> {
    let ab = v
        .as_array()
        .filter(|a| a.len() == 2)
        .and_then(|a| Some((a[0].as_u64()?, a[1].as_u64()?)))
        .ok_or_else(|| {
            bad(format!(
                "{what} is {v}, expected [start, end] (integers >= 0)"
            ))
        })?;
    if ab.0 > ab.1 {
        return Err(bad(format!(
            "{what} is [{}, {}]: start exceeds end",
            ab.0, ab.1
        )));
    }
    Ok(ab.0..ab.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples of the wire format's items (doc examples while `ticket` was a
    /// public module).
    #[test]
    fn wire_format_examples() -> Result<()> {
        // The module: a ticket round-trips, and a path out of the root is refused.
        let part = Part::Chunks {
            array: "group/a.zarr".into(),
            region: ChunkRegion::new(vec![0, 0], vec![3, 2])?,
            range: 0..4,
        };
        let bytes = part.encode();
        assert_eq!(Part::decode(&bytes)?, part);
        assert!(
            Part::decode(br#"{"v":1,"array":"../etc","start":[0],"end":[1],"range":[0,1]}"#)
                .is_err()
        );
        // array_path
        assert_eq!(array_path("group/a.zarr")?, "group/a.zarr");
        assert!(array_path("/etc/passwd").is_err());
        assert!(array_path("a/../../b").is_err());
        assert!(array_path("a//b").is_err());
        // batch_name
        assert!(batch_name("run-7.scores").is_ok());
        assert!(batch_name("a/b").is_err());
        // Target's descriptor path
        let t = Target::array("group/a.zarr")?;
        assert_eq!(t.path_segments(), vec!["zarr", "group", "a.zarr"]);
        assert_eq!(Target::from_segments(&t.path_segments())?, t);
        assert!(Target::array("../x").is_err());
        // Query's descriptor
        let q = Query {
            target: Target::array("a.zarr")?,
            selection: Some(vec![0..10, 5..6]),
            endpoints: Some(3),
        };
        assert_eq!(Query::from_descriptor(&q.descriptor())?, q);
        // ChunkRegion
        let r = ChunkRegion::new(vec![1, 0], vec![3, 2])?;
        assert_eq!(r.len(), 4);
        assert_eq!(r.coords(3)?, vec![2, 1]);
        assert_eq!(r.linear(&[2, 0]), Some(2));
        assert!(ChunkRegion::new(vec![2], vec![1]).is_err());
        // The limits `Target::array`, `Target::batch` and `Query::endpoints` name in
        // their docs.
        assert_eq!(
            (
                MAX_PATH_COMPONENTS,
                MAX_COMPONENT_BYTES,
                MAX_NAME_BYTES,
                MAX_ENDPOINTS
            ),
            (32, 255, 128, 1024)
        );
        Ok(())
    }

    #[test]
    fn parts_round_trip_and_bad_tickets_say_why() {
        let p = Part::Batches {
            name: "x".into(),
            range: 1..3,
        };
        assert_eq!(Part::decode(&p.encode()).unwrap(), p);
        for (bytes, needle) in [
            (&b"\xff\xfe"[..], "not a devbuf Flight ticket"),
            (b"[1]", "not an object"),
            (br#"{"v":2,"batch":"x","range":[0,1]}"#, "\"v\" must be 1"),
            (br#"{"v":1,"batch":"x","range":[0,1],"z":1}"#, "unknown key"),
            (br#"{"v":1,"batch":"x","range":[2,1]}"#, "start exceeds end"),
            (
                br#"{"v":1,"batch":"x","range":[-1,1]}"#,
                "expected [start, end]",
            ),
            (
                br#"{"v":1,"array":"a","batch":"x","range":[0,1]}"#,
                "exactly one",
            ),
            (
                br#"{"v":1,"array":"a/./b","start":[],"end":[],"range":[0,1]}"#,
                "not allowed",
            ),
            (
                br#"{"v":1,"array":"a","start":[0],"end":[2],"range":[0,3]}"#,
                "exceeds the region",
            ),
            (
                br#"{"v":1,"array":"a\\b","start":[0],"end":[2],"range":[0,1]}"#,
                "not allowed",
            ),
        ] {
            let e = Part::decode(bytes).unwrap_err().to_string();
            assert!(e.contains(needle), "{e} lacks {needle:?}");
        }
        let huge = vec![b' '; MAX_TICKET_BYTES + 1];
        assert!(
            Part::decode(&huge)
                .unwrap_err()
                .to_string()
                .contains("at most 4096")
        );
    }

    #[test]
    fn regions_walk_in_c_order() {
        let r = ChunkRegion::new(vec![1, 2, 0], vec![3, 4, 3]).unwrap();
        assert_eq!(r.len(), 12);
        for i in 0..r.len() {
            let c = r.coords(i).unwrap();
            assert_eq!(r.linear(&c), Some(i));
        }
        assert_eq!(r.coords(0).unwrap(), vec![1, 2, 0]);
        assert_eq!(r.coords(1).unwrap(), vec![1, 2, 1]);
        assert!(r.coords(12).is_err());
        assert_eq!(r.linear(&[0, 2, 0]), None);
        assert!(ChunkRegion::new(vec![0; 3], vec![u64::MAX; 3]).is_err());
        let zero_d = ChunkRegion::new(vec![], vec![]).unwrap();
        assert_eq!(zero_d.len(), 1);
        assert_eq!(zero_d.coords(0).unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn descriptors_parse_strictly() {
        let seg = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Target::from_segments(&seg(&["zarr", "g/a.zarr"])).unwrap(),
            Target::Array("g/a.zarr".into())
        );
        for bad in [
            &["zarr"][..],
            &["zarr", ".."],
            &["zarr", "a", "..", "b"],
            &["zarr", "/etc"],
            &["batch", "a/b"],
            &["batch"],
            &["other", "x"],
        ] {
            assert!(Target::from_segments(&seg(bad)).is_err(), "{bad:?}");
        }
        let q = Query::from_descriptor(&FlightDescriptor::new_cmd(
            r#"{"v":1,"array":"a","selection":[[0,1]],"endpoints":0}"#,
        ));
        assert!(q.unwrap_err().to_string().contains("1 to 1024"));
    }
}
