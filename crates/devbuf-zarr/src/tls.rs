//! The process-wide rustls crypto provider (feature `tls`: object stores and devbuf-flight).
//!
//! rustls picks its provider from its crate features when exactly one of `ring` and
//! `aws-lc-rs` is enabled. With both features of devbuf on, both are (object_store's
//! HTTP client brings aws-lc-rs, tonic brings ring), and the first TLS connection would
//! panic inside rustls. Before any TLS work devbuf installs ring as the process default,
//! unless the program installed a provider of its own first (that one is kept).

/// Installs ring as rustls' process default provider when none is installed yet.
pub fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one between the check and here: keeping theirs is
        // right, so the error is ignored.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
