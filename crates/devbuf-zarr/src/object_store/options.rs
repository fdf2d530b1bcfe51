//! [`ObjectStoreOptions`]: how a store by URL is opened (configuration keys beside the
//! environment's) and how its requests run (concurrency, read-ahead bound, timeouts,
//! retries).

use std::time::Duration;

use devbuf_core::error::{Error, Result};

/// How [`UrlStore::open`](super::UrlStore::open) (and
/// [`ZarrArray::open`](crate::ZarrArray::open) of a URL) reach a store.
///
/// Credentials and endpoints come from the environment variables each service's
/// client reads (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
/// `AWS_REGION`, `AWS_ENDPOINT_URL` and `AWS_ALLOW_HTTP` for S3-compatible servers;
/// `GOOGLE_SERVICE_ACCOUNT`, `GOOGLE_APPLICATION_CREDENTIALS` for GCS;
/// `AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY`, ... for Azure), then
/// from [`config`](Self::config), which wins. Keys are `object_store`'s configuration
/// keys (`aws_access_key_id`, `aws_endpoint`, `aws_allow_http`, `google_service_account`,
/// `azure_storage_account_key`, ...); an unknown key is an error naming it.
///
/// ```
/// use devbuf_zarr::object_store::ObjectStoreOptions;
/// let mut o = ObjectStoreOptions::default();
/// o.config.push(("aws_endpoint".into(), "http://127.0.0.1:9000".into()));
/// o.config.push(("aws_allow_http".into(), "true".into()));
/// o.concurrency = 32;
/// assert_eq!(o.concurrency, 32);
/// assert_eq!(o.max_retries, 3);
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObjectStoreOptions {
    /// Configuration keys and values, applied after the environment's.
    pub config: Vec<(String, String)>,
    /// Requests in flight at once per read or write (default 64).
    pub concurrency: usize,
    /// Bytes a read fetches ahead of its decoders, at most (default 512 MiB): the bound
    /// on memory held by fetched, not yet decoded chunks.
    pub read_ahead_bytes: usize,
    /// Inner chunks of a shard whose byte ranges are at most this far apart are fetched
    /// with one range request (default 1 MiB).
    pub coalesce_bytes: u64,
    /// Retries of a request that failed transiently (a 5xx, a timeout, a refused or
    /// reset connection), with exponential backoff; 0 disables them (default 3).
    pub max_retries: usize,
    /// No retry starts after this long since the first attempt (default 30 s).
    pub retry_timeout: Duration,
    /// Time allowed for one request, response body included (default 60 s).
    pub request_timeout: Duration,
    /// Time allowed to connect (default 5 s).
    pub connect_timeout: Duration,
    /// Refuse writes (always on for `http(s)://` stores).
    pub read_only: bool,
}

impl Default for ObjectStoreOptions {
    fn default() -> Self {
        ObjectStoreOptions {
            config: Vec::new(),
            concurrency: 64,
            read_ahead_bytes: 512 << 20,
            coalesce_bytes: 1 << 20,
            max_retries: 3,
            retry_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            read_only: false,
        }
    }
}

/// Configuration keys whose values are secrets: never printed, and removed from error
/// messages.
pub(crate) const SECRET_KEYS: &[&str] = &[
    "aws_secret_access_key",
    "secret_access_key",
    "aws_session_token",
    "session_token",
    "aws_access_key_id",
    "access_key_id",
    "token",
    "aws_sse_customer_key_base64",
    "google_service_account_key",
    "service_account_key",
    "azure_storage_account_key",
    "azure_storage_access_key",
    "account_key",
    "access_key",
    "azure_storage_sas_key",
    "azure_storage_sas_token",
    "sas_key",
    "sas_token",
    "azure_storage_token",
    "bearer_token",
    "azure_client_secret",
    "client_secret",
];

/// Environment variables whose values are secrets.
pub(crate) const SECRET_ENV: &[&str] = &[
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_TOKEN",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
];

pub(crate) fn is_secret(key: &str) -> bool {
    SECRET_KEYS.contains(&key.to_ascii_lowercase().as_str())
}

impl std::fmt::Debug for ObjectStoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let config: Vec<(&str, &str)> = self
            .config
            .iter()
            .map(|(k, v)| (k.as_str(), if is_secret(k) { "***" } else { v.as_str() }))
            .collect();
        f.debug_struct("ObjectStoreOptions")
            .field("config", &config)
            .field("concurrency", &self.concurrency)
            .field("read_ahead_bytes", &self.read_ahead_bytes)
            .field("coalesce_bytes", &self.coalesce_bytes)
            .field("max_retries", &self.max_retries)
            .field("retry_timeout", &self.retry_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl ObjectStoreOptions {
    /// Checks the numeric fields.
    pub(crate) fn validate(&self) -> Result<()> {
        if !(1..=4096).contains(&self.concurrency) {
            return Err(Error::invalid(format!(
                "ObjectStoreOptions::concurrency must be 1..=4096, got {}",
                self.concurrency
            )));
        }
        if self.read_ahead_bytes < (1 << 20) {
            return Err(Error::invalid(format!(
                "ObjectStoreOptions::read_ahead_bytes must be at least 1048576 (1 MiB), got {}",
                self.read_ahead_bytes
            )));
        }
        if self.max_retries > 100 {
            return Err(Error::invalid(format!(
                "ObjectStoreOptions::max_retries must be 0..=100, got {}",
                self.max_retries
            )));
        }
        for (what, t) in [
            ("request_timeout", self.request_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if t.is_zero() {
                return Err(Error::invalid(format!(
                    "ObjectStoreOptions::{what} must be more than zero"
                )));
            }
        }
        Ok(())
    }
}
