//! The names both sides of devbuf's Flight protocol use: the actions a server takes
//! and the URI schemes a Flight location may have. A leaf module: the client, the
//! service and the server's configuration import it, and it imports none of them.

use tonic::transport::Endpoint as TonicEndpoint;

use devbuf_core::error::{Error, Result};

/// The name of the action that removes a registered or uploaded batch (its body: the
/// name).
pub(crate) const REMOVE_ACTION: &str = "remove";

/// A Flight URI (`grpc://`, `grpc+tcp://`, `grpc+tls://`, `http://`, `https://`) as the
/// `http(s)://` URI tonic connects to, and whether it uses TLS.
pub(crate) fn endpoint_uri(uri: &str) -> Result<(String, bool)> {
    let (scheme, rest) = uri.split_once("://").ok_or_else(|| {
        Error::invalid(format!(
            "Flight URI {uri:?} has no scheme (use grpc://host:port or grpc+tls://host:port)"
        ))
    })?;
    let (http, tls) = match scheme {
        "grpc" | "grpc+tcp" | "http" => ("http", false),
        "grpc+tls" | "https" => ("https", true),
        _ => {
            return Err(Error::invalid(format!(
                "Flight URI {uri:?}: scheme {scheme:?} is not grpc, grpc+tcp, grpc+tls, http or \
                 https"
            )));
        }
    };
    let out = format!("{http}://{rest}");
    TonicEndpoint::from_shared(out.clone())
        .map_err(|e| Error::invalid(format!("Flight URI {uri:?}: {e}")))?;
    Ok((out, tls))
}
