//! [`UrlStore`]: a zarr store in object storage (S3 and S3-compatible servers, Google
//! Cloud Storage, Azure Blob Storage, plain HTTP(S) servers read-only, local files),
//! opened by URL, as a devbuf [`Store`].

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutPayload,
};

use super::options::{ObjectStoreOptions, SECRET_ENV, is_secret};
use super::runtime::block_on;
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::{AsyncStore, BufferPrototype, ByteBuffer, ByteRequest, Store};

/// Which bytes of an object a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Span {
    /// All of them.
    Whole,
    /// These (the response must hold exactly these).
    Bytes(Range<u64>),
    /// The last `n` (exactly `n`: the object must be at least that long).
    Last(u64),
}

/// A zarr store in object storage, by URL: `s3://bucket/path`, `gs://bucket/path`,
/// `az://container/path` (and the `https://` forms of these services), a plain
/// `http(s)://host/path` server (read-only: GET with byte ranges), or `file:///path`.
///
/// It is a devbuf [`Store`] (synchronous; requests run on a small runtime of devbuf's
/// own), so every store API works on it, and an [`AsyncStore`] (the same calls as
/// futures on the caller's tokio runtime); [`ZarrArray::open`](crate::ZarrArray::open)
/// of an `Arc<UrlStore>` or a URL opens an array with it and lets the read engine fetch many chunks at once
/// ([`ObjectStoreOptions::concurrency`]), ahead of its decoders.
///
/// **Errors** name the operation, the key and the store's URL; a missing key is
/// `Ok(None)` (a missing chunk reads as the fill value), a refused or failed request is
/// [`Error::Io`] after the retries [`ObjectStoreOptions`] allows for transient failures.
/// No credential appears in an error message or in `Debug` output: the URL is shown
/// without user information or query, and the values of secret configuration keys
/// and environment variables are replaced by `***` wherever a message would hold them.
///
/// ```
/// use devbuf_zarr::object_store::{ObjectStoreOptions, UrlStore};
/// use devbuf_core::zarr::{ByteBuffer, BufferPrototype, Store};
/// let dir = std::env::temp_dir().join(format!("devbuf-doc-urlstore-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let store = UrlStore::open(&format!("file://{}", dir.display()), &ObjectStoreOptions::default())?;
/// store.set("a/zarr.json", &ByteBuffer::from(&b"{}"[..]))?;
/// assert_eq!(store.list()?, vec!["a/zarr.json".to_string()]);
/// assert!(store.get("a/missing", &BufferPrototype::Host, None)?.is_none());
/// std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub struct UrlStore {
    pub(super) inner: Arc<dyn ObjectStore>,
    pub(super) prefix: Path,
    url: String,
    secrets: Vec<String>,
    options: ObjectStoreOptions,
}

impl std::fmt::Debug for UrlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlStore")
            .field("url", &self.url)
            .field("options", &self.options)
            .finish()
    }
}

/// `url` without user information, query and fragment (where credentials may be).
fn redacted(url: &url::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string().trim_end_matches('/').to_string()
}

fn millis(d: std::time::Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Applies `config` to a builder through its typed key parser, naming an unknown key.
macro_rules! configure {
    ($builder:expr, $key:ty, $service:literal, $opts:expr) => {{
        let mut b = $builder;
        let defaults = [
            ("timeout", millis($opts.request_timeout)),
            ("connect_timeout", millis($opts.connect_timeout)),
        ];
        for (k, v) in defaults
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .chain(
                $opts
                    .config
                    .iter()
                    .map(|(k, v)| (k.to_ascii_lowercase(), v.clone())),
            )
        {
            let key: $key = k.parse().map_err(|_| {
                Error::invalid(format!(
                    "unknown {} configuration key {k:?} (see object_store's {} for the \
                     valid keys)",
                    $service,
                    stringify!($key)
                ))
            })?;
            b = b.with_config(key, v);
        }
        b.with_retry(retry(&$opts))
    }};
}

fn retry(o: &ObjectStoreOptions) -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig::default(),
        max_retries: o.max_retries,
        retry_timeout: o.retry_timeout,
    }
}

impl UrlStore {
    /// Opens the store at `url` (see the type's docs for the schemes and
    /// [`ObjectStoreOptions`] for credentials). Nothing is requested yet: a wrong
    /// endpoint or credential shows at the first read or write.
    pub fn open(url: &str, options: &ObjectStoreOptions) -> Result<UrlStore> {
        options.validate()?;
        crate::tls::ensure_crypto_provider();
        let parsed = url::Url::parse(url).map_err(|e| {
            // Not echoed whole: a malformed URL may still hold a credential.
            let head: String = url.chars().take_while(|&c| c != ':' && c != '@').collect();
            Error::invalid(format!(
                "the store URL (starting {head:?}) is not a URL ({e}); expected s3://, gs://, \
                 az://, http(s):// or file:// followed by a path"
            ))
        })?;
        let shown = redacted(&parsed);
        let (scheme, path) = ObjectStoreScheme::parse(&parsed).map_err(|e| {
            Error::invalid(format!(
                "{shown}: {e} (supported: s3://, s3a://, gs://, az://, abfs(s)://, \
                 http(s):// and file://)"
            ))
        })?;
        let mut options = options.clone();
        let built: std::result::Result<Arc<dyn ObjectStore>, Error> = match scheme {
            ObjectStoreScheme::AmazonS3 => {
                let b = object_store::aws::AmazonS3Builder::from_env().with_url(url);
                let b = configure!(b, object_store::aws::AmazonS3ConfigKey, "S3", options);
                b.build()
                    .map(|s| Arc::new(s) as _)
                    .map_err(|e| build_err(&shown, e))
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                let b = object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(url);
                let b = configure!(b, object_store::gcp::GoogleConfigKey, "GCS", options);
                b.build()
                    .map(|s| Arc::new(s) as _)
                    .map_err(|e| build_err(&shown, e))
            }
            ObjectStoreScheme::MicrosoftAzure => {
                let b = object_store::azure::MicrosoftAzureBuilder::from_env().with_url(url);
                let b = configure!(b, object_store::azure::AzureConfigKey, "Azure", options);
                b.build()
                    .map(|s| Arc::new(s) as _)
                    .map_err(|e| build_err(&shown, e))
            }
            ObjectStoreScheme::Http => {
                options.read_only = true;
                if parsed.scheme() == "http" {
                    // An http:// URL asks for plain HTTP: no need to say it twice.
                    options
                        .config
                        .insert(0, ("allow_http".into(), "true".into()));
                }
                let base = &parsed[..url::Position::BeforePath];
                let b = object_store::http::HttpBuilder::new().with_url(base);
                let b = configure!(b, object_store::ClientConfigKey, "HTTP", options);
                b.build()
                    .map(|s| Arc::new(s) as _)
                    .map_err(|e| build_err(&shown, e))
            }
            ObjectStoreScheme::Local => {
                if let Some((k, _)) = options.config.first() {
                    return Err(Error::invalid(format!(
                        "{shown}: file:// stores take no configuration keys (got {k:?})"
                    )));
                }
                Ok(Arc::new(object_store::local::LocalFileSystem::new()) as _)
            }
            other => Err(Error::invalid(format!(
                "{shown}: {other:?} URLs are not supported (supported: s3://, gs://, az://, \
                 http(s):// and file://)"
            ))),
        };
        let mut secrets: Vec<String> = options
            .config
            .iter()
            .filter(|(k, _)| is_secret(k))
            .map(|(_, v)| v.clone())
            .collect();
        secrets.extend(SECRET_ENV.iter().filter_map(|k| std::env::var(k).ok()));
        if let Some(p) = parsed.password() {
            secrets.push(p.to_string());
        }
        secrets.extend(parsed.query_pairs().map(|(_, v)| v.into_owned()));
        secrets.retain(|s| s.len() >= 4);
        let store = UrlStore {
            inner: built.map_err(|e| scrub_err(e, &secrets))?,
            prefix: path,
            url: shown,
            secrets,
            options,
        };
        Ok(store)
    }

    /// A store over any [`ObjectStore`] (a client configured by hand, a wrapper that
    /// adds metrics, an in-memory store), with keys under `prefix`; `name` is how errors
    /// name the store.
    pub fn from_object_store(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        name: &str,
        options: &ObjectStoreOptions,
    ) -> Result<UrlStore> {
        options.validate()?;
        crate::tls::ensure_crypto_provider();
        let prefix = Path::parse(prefix.trim_matches('/'))
            .map_err(|e| Error::invalid(format!("store prefix {prefix:?}: {e}")))?;
        Ok(UrlStore {
            inner: store,
            prefix,
            url: name.to_string(),
            secrets: Vec::new(),
            options: options.clone(),
        })
    }

    /// The store's URL as errors show it (no user information or query).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The `object_store` client underneath (to wrap it, e.g. with metrics, and build
    /// another store with [`from_object_store`](Self::from_object_store)).
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// The object path under which keys live (empty: the bucket's root).
    pub fn prefix(&self) -> &str {
        self.prefix.as_ref()
    }

    /// The options it was opened with.
    pub(crate) fn options(&self) -> &ObjectStoreOptions {
        &self.options
    }

    /// The object path of `key`.
    pub(crate) fn path(&self, key: &str) -> Result<Path> {
        let full = if self.prefix.as_ref().is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        };
        Path::parse(&full).map_err(|e| {
            Error::invalid(format!("zarr key {key:?} is not a valid object path: {e}"))
        })
    }

    /// An error of the client: the message with its causes (where "timed out" or
    /// "connection refused" is said), of the kind the client's error is (a missing
    /// object [`Error::NotFound`], HTTP 401/403 [`Error::PermissionDenied`], a request
    /// that timed out [`Error::Timeout`], an operation the store lacks
    /// [`Error::Unsupported`], else [`Error::Io`]), with the client's error as source
    /// (replaced by its scrubbed text when a secret appears anywhere in it).
    pub(crate) fn client_error(&self, op: &str, key: &str, e: object_store::Error) -> Error {
        let mut text = e.to_string();
        let mut cause = std::error::Error::source(&e);
        let mut timed_out = false;
        while let Some(c) = cause {
            timed_out |= c
                .downcast_ref::<object_store::client::HttpError>()
                .is_some_and(|h| h.kind() == object_store::client::HttpErrorKind::Timeout)
                || c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
            let c_text = c.to_string();
            if !text.contains(&c_text) {
                text.push_str(": ");
                text.push_str(&c_text);
            }
            cause = c.source();
        }
        let message = scrub(
            &format!("{op} {key} of {}: {text}", self.url),
            &self.secrets,
        );
        let err = match &e {
            object_store::Error::NotFound { .. } => {
                Error::not_found(format!("object store request: {message}"))
            }
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Error::permission_denied(format!(
                "object store request refused (check the credentials): {message}"
            )),
            object_store::Error::NotSupported { .. }
            | object_store::Error::NotImplemented { .. } => {
                Error::unsupported(format!("object store request: {message}"))
            }
            _ if timed_out => Error::timeout(format!("object store request: {message}")),
            _ => self.error_text(message),
        };
        let leaks = !self.secrets.is_empty() && {
            let shown = format!("{e:?} {text}");
            self.secrets.iter().any(|s| shown.contains(s.as_str()))
        };
        if leaks {
            err.with_source(ScrubbedCause(scrub(&text, &self.secrets)))
        } else {
            err.with_source(e)
        }
    }

    /// An error of `op` on `key`, naming the store and without secrets.
    pub(crate) fn error(&self, op: &str, key: &str, e: impl std::fmt::Display) -> Error {
        self.error_text(scrub(
            &format!("{op} {key} of {}: {e}", self.url),
            &self.secrets,
        ))
    }

    /// [`Error::Io`] with a scrubbed `message`; an HTTP 401/403 that reached here as
    /// text is [`Error::PermissionDenied`] (see [`denied_in_text`]).
    fn error_text(&self, message: String) -> Error {
        if denied_in_text(&message) {
            Error::permission_denied(format!(
                "object store request refused (check the credentials): {message}"
            ))
        } else {
            Error::io("object store request", message)
        }
    }

    /// Fetches `span` of `key`: `None` when the key does not exist. A response
    /// shorter or longer than asked for is an error.
    pub(crate) async fn fetch(&self, key: &str, span: Span) -> Result<Option<Bytes>> {
        let (range, exact) = match span {
            Span::Whole => (None, None),
            Span::Bytes(r) => (Some(GetRange::Bounded(r.clone())), Some(r.end - r.start)),
            Span::Last(n) => (Some(GetRange::Suffix(n)), Some(n)),
        };
        let timed = tracing::enabled!(tracing::Level::DEBUG).then(std::time::Instant::now);
        let got = self.fetch_range(key, range).await;
        if let Some(t) = timed {
            tracing::debug!(
                store = %self.url(),
                key,
                bytes = got.as_ref().map_or(0, |b| b.as_ref().map_or(0, |b| b.len())),
                us = t.elapsed().as_micros() as u64,
                found = got.as_ref().is_ok_and(|b| b.is_some()),
                error = got.as_ref().err().map(tracing::field::display),
                "fetched"
            );
        }
        let got = got?;
        if let (Some(b), Some(n)) = (&got, exact)
            && b.len() as u64 != n
        {
            return Err(self.error(
                "GET",
                key,
                format!(
                    "{} bytes came back, {n} were asked for (the object is shorter than its \
                     index or metadata says)",
                    b.len()
                ),
            ));
        }
        Ok(got)
    }

    pub(super) async fn fetch_range(
        &self,
        key: &str,
        range: Option<GetRange>,
    ) -> Result<Option<Bytes>> {
        let path = self.path(key)?;
        let want = match &range {
            Some(GetRange::Bounded(r)) => Some(r.end.saturating_sub(r.start)),
            _ => None,
        };
        let opts = GetOptions {
            range,
            ..GetOptions::default()
        };
        let got = match self.inner.get_opts(&path, opts).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.client_error("GET", key, e)),
        };
        let expected = got.range.end.saturating_sub(got.range.start);
        let bytes = got
            .bytes()
            .await
            .map_err(|e| self.client_error("GET (reading the response)", key, e))?;
        if bytes.len() as u64 != expected || want.is_some_and(|w| w != expected) {
            return Err(self.error(
                "GET",
                key,
                format!(
                    "the response holds {} bytes, {} were asked for (a response cut short, or \
                     a range past the object's end)",
                    bytes.len(),
                    want.unwrap_or(expected)
                ),
            ));
        }
        Ok(Some(bytes))
    }

    /// Stores `bytes` under `key` (one PUT).
    pub(crate) async fn put(&self, key: &str, bytes: Bytes) -> Result<()> {
        self.writable("PUT", key)?;
        let path = self.path(key)?;
        self.inner
            .put(&path, PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.client_error("PUT", key, e))
    }

    pub(super) fn writable(&self, op: &str, key: &str) -> Result<()> {
        if self.options.read_only {
            return Err(Error::ReadOnly(format!(
                "{op} {key} of {}: the store is read-only",
                self.url
            )));
        }
        Ok(())
    }

    /// Every key under the directory `dir` (`""`: all), relative to the store's prefix.
    pub(super) async fn keys_under(&self, dir: &str) -> Result<Vec<String>> {
        let dir = dir.trim_end_matches('/');
        let at = if dir.is_empty() {
            self.prefix.clone()
        } else {
            self.path(dir)?
        };
        let listed: Vec<object_store::ObjectMeta> = self
            .inner
            .list(Some(&at))
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| self.client_error("LIST", dir, e))?;
        let mut keys: Vec<String> = listed
            .into_iter()
            .filter_map(|m| self.relative(&m.location))
            .collect();
        keys.sort();
        Ok(keys)
    }

    pub(super) fn relative(&self, p: &Path) -> Option<String> {
        let parts: Vec<_> = p.prefix_match(&self.prefix)?.collect();
        Some(
            parts
                .iter()
                .map(|x| x.as_ref())
                .collect::<Vec<_>>()
                .join("/"),
        )
    }
}

fn build_err(url: &str, e: object_store::Error) -> Error {
    Error::invalid(format!("cannot open the object store at {url}: {e}"))
}

/// `message` with every secret replaced by `***`.
fn scrub(message: &str, secrets: &[String]) -> String {
    let mut m = message.to_string();
    for s in secrets {
        if m.contains(s.as_str()) {
            m = m.replace(s.as_str(), "***");
        }
    }
    m
}

fn scrub_err(mut e: Error, secrets: &[String]) -> Error {
    match &mut e {
        Error::InvalidArgument(m)
        | Error::Malformed(m)
        | Error::NotFound { message: m, .. }
        | Error::PermissionDenied { message: m, .. }
        | Error::Unsupported { message: m, .. }
        | Error::Timeout { message: m, .. }
        | Error::Io { message: m, .. } => *m = scrub(m, secrets),
        _ => {}
    }
    e
}

/// The text of a client's error that held a secret, scrubbed: the source an error keeps
/// in its place.
#[derive(Debug)]
struct ScrubbedCause(String);

impl std::fmt::Display for ScrubbedCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScrubbedCause {}

impl Store for UrlStore {
    fn get(
        &self,
        key: &str,
        prototype: &BufferPrototype,
        byte_range: Option<ByteRequest>,
    ) -> Result<Option<ByteBuffer>> {
        match block_on(self.get_async(key, byte_range))?? {
            None => Ok(None),
            Some(b) => Ok(Some(ByteBuffer::from(b).to_prototype(prototype)?)),
        }
    }

    fn set(&self, key: &str, value: &ByteBuffer) -> Result<()> {
        self.writable("PUT", key)?;
        let bytes = value.to_host()?;
        block_on(self.put(key, bytes))?
    }

    fn delete(&self, key: &str) -> Result<()> {
        block_on(self.delete_async(key))?
    }

    fn exists(&self, key: &str) -> Result<bool> {
        Ok(self.getsize(key)?.is_some())
    }

    fn list(&self) -> Result<Vec<String>> {
        block_on(self.keys_under(""))?
    }

    fn list_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        block_on(self.list_prefix_async(prefix))?
    }

    fn list_dir(&self, prefix: &str) -> Result<Vec<String>> {
        block_on(self.list_dir_async(prefix))?
    }

    fn read_only(&self) -> bool {
        self.options.read_only
    }

    fn getsize(&self, key: &str) -> Result<Option<usize>> {
        block_on(self.getsize_async(key))?
    }
}

/// Whether an error's text says the request was refused: HTTP status 401 or 403 as the
/// object store client writes it ("status code: 403 Forbidden", "status 401"), or
/// "permission" / "unauthenticated". A bare "403" elsewhere in the text is not enough:
/// the text also holds the URL, the key and the time the retries took ("in 215.4035ms"
/// once made a 500 read as refused).
fn denied_in_text(message: &str) -> bool {
    let status = |code: &str| {
        message.match_indices(code).any(|(i, _)| {
            let before = message[..i].trim_end_matches([' ', ':']);
            let after = message[i + code.len()..].chars().next();
            (before.ends_with("status") || before.ends_with("status code"))
                && !after.is_some_and(|c| c.is_ascii_alphanumeric())
        })
    };
    status("401")
        || status("403")
        || message.contains("ermission")
        || message.contains("nauthenticated")
}

#[cfg(test)]
mod tests {
    use super::denied_in_text;

    #[test]
    fn refusals_are_read_from_the_status_not_from_any_digits() {
        // The message of a 500 whose retries took 215.4035 ms (seen in CI): not refused.
        let slow_500 = "GET 1.0.0 of http://127.0.0.1:35701/a.zarr: Error performing GET \
            http://127.0.0.1:35701/a.zarr/1.0.0 in 215.4035ms, after 2 retries - Server \
            returned non-2xx status code: 500 Internal Server Error: ";
        assert!(!denied_in_text(slow_500));
        // Keys, ports and sizes with 401 or 403 in them: not refused.
        for m in [
            "GET c/403/1 of http://h:4030/a.zarr: status code: 500 Internal Server Error",
            "GET 0.401.2 of http://h/a.zarr: connection reset after 4031 bytes",
            "GET k of http://h/a.zarr: Server returned non-2xx status code: 4031",
        ] {
            assert!(!denied_in_text(m), "{m}");
        }
        // What the client writes for refusals: refused.
        for m in [
            "GET k of http://h/a.zarr: Server returned non-2xx status code: 403 Forbidden: ",
            "GET k of http://h/a.zarr: Client error with status 401 Unauthorized: no token",
            "GET k of s3://b/a.zarr: status: 403",
            "GET k of gs://b/a.zarr: Permission denied by the bucket policy",
            "GET k of az://c/a.zarr: Unauthenticated request",
        ] {
            assert!(denied_in_text(m), "{m}");
        }
    }
}
