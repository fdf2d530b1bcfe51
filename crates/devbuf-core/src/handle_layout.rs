//! Small helpers for the fixed, versioned little-endian layouts of IPC handles:
//! a writer, a bounds-checked reader whose every failure is [`Error::Malformed`], a
//! checksum and hexadecimal text.

use crate::error::{Error, Result};

/// FNV-1a, 64 bits: the checksum that closes every handle layout.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Appends little-endian fields to a byte vector.
#[derive(Default)]
pub(crate) struct Writer {
    pub(crate) bytes: Vec<u8>,
}

impl Writer {
    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(b);
        self
    }
    pub(crate) fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub(crate) fn i32(&mut self, v: i32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    /// Appends the checksum of everything written so far and returns the bytes.
    pub(crate) fn finish_with_checksum(&mut self) -> Vec<u8> {
        let c = fnv1a64(&self.bytes);
        self.u64(c);
        std::mem::take(&mut self.bytes)
    }
}

/// Reads little-endian fields from a byte slice; running off the end is `Malformed`.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader {
            bytes,
            pos: 0,
            what,
        }
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.bytes.len() => {
                let s = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            _ => Err(Error::Malformed(format!(
                "{} truncated: needed {} bytes at offset {}, only {} bytes in total",
                self.what,
                n,
                self.pos,
                self.bytes.len()
            ))),
        }
    }
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    pub(crate) fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub(crate) fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

/// The common header of every devbuf handle layout: checks the length, magic, version,
/// declared size and checksum, and returns a reader positioned after the header
/// (magic 8 bytes, version u16, total size u16, flags u32) together with the flags.
///
/// `others` names the magics of the other handle kinds, so that handing a handle of
/// one kind to the parser of another gets a message that says so.
pub(crate) fn open_layout<'a>(
    bytes: &'a [u8],
    what: &'static str,
    magic: &[u8; 8],
    version: u16,
    size: usize,
    others: &[(&[u8; 8], &str)],
) -> Result<(Reader<'a>, u32)> {
    if bytes.len() >= 8 && &bytes[..8] != magic {
        if let Some((_, name)) = others.iter().find(|(m, _)| &bytes[..8] == *m) {
            return Err(Error::Malformed(format!(
                "these bytes are {name}, not {what}"
            )));
        }
        return Err(Error::Malformed(format!(
            "{what}: wrong magic {} (expected {:?}); these bytes are not a devbuf handle",
            hex(&bytes[..8]),
            String::from_utf8_lossy(magic)
        )));
    }
    if bytes.len() < 12 {
        return Err(Error::Malformed(format!(
            "{what} truncated: {} bytes, a version-{version} handle is {size} bytes",
            bytes.len()
        )));
    }
    let mut r = Reader::new(bytes, what);
    r.take(8)?;
    let v = r.u16()?;
    if v != version {
        return Err(Error::Malformed(format!(
            "{what} has layout version {v}; this devbuf reads version {version} only"
        )));
    }
    let declared = r.u16()? as usize;
    if declared != size {
        return Err(Error::Malformed(format!(
            "{what} declares a size of {declared} bytes; version {version} handles are {size} bytes"
        )));
    }
    if bytes.len() != size {
        return Err(Error::Malformed(format!(
            "{what} is {} bytes long; version {version} handles are exactly {size} bytes{}",
            bytes.len(),
            if bytes.len() < size {
                " (truncated)"
            } else {
                " (trailing bytes)"
            }
        )));
    }
    let stored = u64::from_le_bytes(
        bytes[size - 8..]
            .try_into()
            .map_err(|_| Error::Malformed(format!("{what}: no checksum")))?,
    );
    let computed = fnv1a64(&bytes[..size - 8]);
    if stored != computed {
        return Err(Error::Malformed(format!(
            "{what} checksum mismatch (stored {stored:#018x}, computed {computed:#018x}): the bytes were altered or truncated"
        )));
    }
    let flags = r.u32()?;
    Ok((r, flags))
}

/// Lowercase hexadecimal.
pub(crate) fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Parses hexadecimal (either case; surrounding whitespace ignored).
pub(crate) fn from_hex(text: &str, what: &'static str) -> Result<Vec<u8>> {
    let t = text.trim();
    // The first character that is not a digit is named before an odd length is (the
    // `hex` crate checks the length first, and names a byte, not a character).
    if let Some((i, ch)) = t.char_indices().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(Error::Malformed(format!(
            "{what}: character {ch:?} at byte {i} is not a hexadecimal digit (0-9, a-f, A-F)"
        )));
    }
    if !t.len().is_multiple_of(2) {
        return Err(Error::Malformed(format!(
            "{what}: hexadecimal text has an odd number of digits ({})",
            t.len()
        )));
    }
    hex::decode(t).map_err(|e| Error::Malformed(format!("{what}: {e}")))
}

/// A token that identifies this process (not only its pid, which another process in
/// another pid namespace may share): random per process.
pub(crate) fn process_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::OnceLock;
    static TOKEN: OnceLock<u64> = OnceLock::new();
    *TOKEN.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(t.as_nanos());
        }
        h.finish() | 1
    })
}

/// A fresh random 64-bit value (never 0).
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(process_token());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish() | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_errors() {
        let v: Vec<u8> = (0..=255).collect();
        assert_eq!(from_hex(&hex(&v), "x").unwrap(), v);
        assert_eq!(from_hex(" 0aFf\n", "x").unwrap(), vec![10, 255]);
        assert!(from_hex("abc", "x").is_err());
        assert!(from_hex("zz", "x").is_err());
        let e = from_hex("é0", "x").unwrap_err().to_string();
        assert!(e.contains("character 'é' at byte 0"), "{e}");
        let e = from_hex("00zz", "x").unwrap_err().to_string();
        assert!(e.contains("character 'z' at byte 2"), "{e}");
    }

    #[test]
    fn tokens_differ() {
        assert_eq!(process_token(), process_token());
        assert_ne!(random_u64(), random_u64());
    }
}
