//! Bearer tokens: every call but the handshake carries `authorization: Bearer <token>`,
//! and the token is either one the server was given (a string, or a token file both
//! sides read) or one the Flight `Handshake` issued in exchange for the HTTP Basic
//! credentials the server was configured with (what `pyarrow.flight`'s
//! `authenticate_basic_token` and arrow-rs's clients send).
//!
//! Without a valid token every call is refused with `Unauthenticated`, and the message
//! says what was missing. Tokens are compared in constant time; issued tokens live as
//! long as the server (at most [`MAX_ISSUED`]; the oldest are forgotten first).

use std::collections::{HashSet, VecDeque};
use std::path::Path;
use std::sync::Mutex;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use subtle::ConstantTimeEq as _;
use tonic::Status;
use tonic::metadata::MetadataMap;

use devbuf_core::error::{Error, Result};

/// Most tokens the handshake keeps issued at once.
pub(crate) const MAX_ISSUED: usize = 100_000;
/// Longest token accepted, in bytes.
pub(crate) const MAX_TOKEN_BYTES: usize = 1024;

/// Reads a token file: its content without surrounding white space, which must be 1 to
/// `MAX_TOKEN_BYTES` (1024) visible ASCII characters (what an HTTP header can carry).
///
/// ```
/// let p = std::env::temp_dir().join(format!("devbuf-doc-token-{}", std::process::id()));
/// std::fs::write(&p, "abc123\n")?;
/// assert_eq!(devbuf_flight::read_token_file(&p)?, "abc123");
/// std::fs::remove_file(&p)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_token_file(path: impl AsRef<Path>) -> Result<String> {
    let path = path.as_ref();
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::from_io(
            "reading a token file",
            format!("{}: {e}", path.display()),
            e,
        )
    })?;
    if !meta.is_file() || meta.len() > MAX_TOKEN_BYTES as u64 + 64 {
        return Err(Error::invalid(format!(
            "token file {} must be a regular file of at most {MAX_TOKEN_BYTES} bytes",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::from_io(
            "reading a token file",
            format!("{}: {e}", path.display()),
            e,
        )
    })?;
    check_token(text.trim()).map_err(|e| e.context(format_args!("token file {}", path.display())))
}

/// Checks that `token` can travel in a header: 1 to [`MAX_TOKEN_BYTES`] visible ASCII
/// characters.
pub(crate) fn check_token(token: &str) -> Result<String> {
    if token.is_empty()
        || token.len() > MAX_TOKEN_BYTES
        || !token.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Error::invalid(format!(
            "a token must be 1 to {MAX_TOKEN_BYTES} visible ASCII characters (got {} bytes)",
            token.len()
        )));
    }
    Ok(token.to_string())
}

/// A fresh random token: 32 bytes from the operating system's generator (`getrandom`),
/// as 64 lowercase hexadecimal digits.
///
/// ```
/// let t = devbuf_flight::generate_token()?;
/// assert_eq!(t.len(), 64);
/// assert_ne!(t, devbuf_flight::generate_token()?);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn generate_token() -> Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| {
        const OP: &str = "generating a token from the operating system's random generator";
        // The OS's error as source, where there is one.
        match e.raw_os_error() {
            Some(code) => {
                Error::from_io(OP, e.to_string(), std::io::Error::from_raw_os_error(code))
            }
            None => Error::io(OP, e),
        }
    })?;
    Ok(hex::encode(b))
}

/// Constant-time equality of two byte strings (the length is not secret).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    bool::from(a.ct_eq(b))
}

/// The server's tokens and handshake credentials.
pub(crate) struct Auth {
    tokens: Vec<String>,
    basic: Option<(String, String)>,
    issued: Mutex<(HashSet<String>, VecDeque<String>)>,
}

impl Auth {
    pub(crate) fn new(tokens: Vec<String>, basic: Option<(String, String)>) -> Auth {
        Auth {
            tokens,
            basic,
            issued: Mutex::new((HashSet::new(), VecDeque::new())),
        }
    }

    /// Whether any way in is configured (a server without one refuses everything).
    pub(crate) fn is_configured(&self) -> bool {
        !self.tokens.is_empty() || self.basic.is_some()
    }

    fn valid(&self, token: &str) -> bool {
        // Every configured token is compared, so the time does not say which matched.
        let configured = self
            .tokens
            .iter()
            .fold(false, |acc, t| acc | ct_eq(t.as_bytes(), token.as_bytes()));
        configured
            || self
                .issued
                .lock()
                .map(|g| g.0.contains(token))
                .unwrap_or(false)
    }

    /// Checks the bearer token of a call.
    pub(crate) fn check(&self, md: &MetadataMap) -> Result<(), Status> {
        let Some(v) = md.get("authorization") else {
            return Err(Status::unauthenticated(
                "no authorization header: send 'authorization: Bearer <token>' (the server's \
                 token, or one the Handshake issued)",
            ));
        };
        let v = v
            .to_str()
            .map_err(|_| Status::unauthenticated("the authorization header is not ASCII"))?;
        let Some(token) = strip_scheme(v, "bearer") else {
            return Err(Status::unauthenticated(
                "the authorization header is not 'Bearer <token>'",
            ));
        };
        if self.valid(token.trim()) {
            Ok(())
        } else {
            Err(Status::unauthenticated("invalid bearer token"))
        }
    }

    /// The handshake: a valid bearer token is confirmed (and returned), valid Basic
    /// credentials get a new token; anything else is refused.
    pub(crate) fn handshake(&self, md: &MetadataMap) -> Result<String, Status> {
        let header = md.get("authorization").and_then(|v| v.to_str().ok());
        if let Some(token) = header.and_then(|v| strip_scheme(v, "bearer")) {
            let token = token.trim();
            return if self.valid(token) {
                Ok(token.to_string())
            } else {
                Err(Status::unauthenticated("invalid bearer token"))
            };
        }
        let Some((user, password)) = &self.basic else {
            return Err(Status::unauthenticated(
                "this server issues no tokens: send its token as 'authorization: Bearer <token>'",
            ));
        };
        let Some(encoded) = header.and_then(|v| strip_scheme(v, "basic")) else {
            return Err(Status::unauthenticated(
                "the handshake needs 'authorization: Basic <base64 of user:password>'",
            ));
        };
        let decoded = decode_base64(encoded.trim())
            .ok_or_else(|| Status::unauthenticated("the Basic credentials are not valid base64"))?;
        let expected = format!("{user}:{password}");
        if !ct_eq(&decoded, expected.as_bytes()) {
            return Err(Status::unauthenticated("wrong user name or password"));
        }
        let token = generate_token().map_err(|e| Status::internal(e.to_string()))?;
        let mut g = self
            .issued
            .lock()
            .map_err(|_| Status::internal("the token table is poisoned"))?;
        if g.1.len() >= MAX_ISSUED
            && let Some(old) = g.1.pop_front()
        {
            g.0.remove(&old);
        }
        g.0.insert(token.clone());
        g.1.push_back(token.clone());
        Ok(token)
    }
}

/// `value` without its (case-insensitive) `scheme ` prefix.
fn strip_scheme<'a>(value: &'a str, scheme: &str) -> Option<&'a str> {
    let (s, rest) = value.split_once(' ')?;
    s.eq_ignore_ascii_case(scheme).then_some(rest)
}

/// Standard base64 (the `+/` alphabet) that reads padding as optional: what the
/// hand-written decoder before `base64` accepted (trailing `=` ignored, stray low bits
/// of the last digit too).
const BASE64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// Standard base64 (with or without padding); `None` on anything else.
pub(crate) fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    if s.len() > 4 * MAX_TOKEN_BYTES {
        return None;
    }
    BASE64_LENIENT.decode(s).ok()
}

/// Standard base64 with padding.
pub(crate) fn encode_base64(b: &[u8]) -> String {
    STANDARD.encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for s in ["", "a", "ab", "abc", "user:pässword", "x:y:z"] {
            let e = encode_base64(s.as_bytes());
            assert_eq!(decode_base64(&e).unwrap(), s.as_bytes(), "{e}");
        }
        assert_eq!(encode_base64(b"user:pass"), "dXNlcjpwYXNz");
        assert!(decode_base64("a$==").is_none());
        // What the hand-written decoder accepted: padding optional (and repeated),
        // stray low bits in the last digit; a lone digit is not a byte.
        assert_eq!(decode_base64("dXNlcjpwYXNz").unwrap(), b"user:pass");
        assert_eq!(decode_base64("YQ").unwrap(), b"a");
        assert_eq!(decode_base64("YQ==").unwrap(), b"a");
        assert_eq!(decode_base64("YR==").unwrap(), b"a");
        assert!(decode_base64("Y").is_none());
        assert!(decode_base64("YQ=a").is_none());
        assert!(decode_base64(&"A".repeat(4 * MAX_TOKEN_BYTES + 4)).is_none());
    }

    #[test]
    fn tokens_are_checked() {
        let auth = Auth::new(vec!["good".into()], Some(("u".into(), "p".into())));
        let md = |v: &str| {
            let mut m = MetadataMap::new();
            m.insert("authorization", v.parse().unwrap());
            m
        };
        assert!(auth.check(&md("Bearer good")).is_ok());
        assert!(auth.check(&md("bearer good")).is_ok());
        assert!(auth.check(&md("Bearer bad")).is_err());
        assert!(auth.check(&md("Basic good")).is_err());
        assert!(auth.check(&MetadataMap::new()).is_err());
        let issued = auth
            .handshake(&md(&format!("Basic {}", encode_base64(b"u:p"))))
            .unwrap();
        assert!(auth.check(&md(&format!("Bearer {issued}"))).is_ok());
        assert!(
            auth.handshake(&md(&format!("Basic {}", encode_base64(b"u:x"))))
                .is_err()
        );
        assert!(check_token("has space").is_err());
    }

    #[test]
    fn generated_tokens_are_hex() {
        let t = generate_token().unwrap();
        assert_eq!(t.len(), 64);
        assert!(
            t.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert!(ct_eq(t.as_bytes(), t.clone().as_bytes()));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
    }
}
