//! What every example's `main` shares: errors are printed for a person to read
//! (`Display`: "error: cannot open ...", not `Debug`'s `Malformed("...")`).

pub mod progress;

use std::fmt::Display;
use std::process::ExitCode;

/// Prints the error of `result` (if any) with `Display` on stderr and gives the exit
/// code: success, or 1.
pub fn exit<E: Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the zarr array at `source`: a directory, or with the `object_store` feature a
/// URL (`s3://`, `gs://`, `az://`, `http(s)://`, `file://`; credentials and endpoint
/// from the environment, e.g. `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`).
#[cfg(feature = "zarr")]
#[allow(dead_code)]
pub fn open_array(source: &str) -> devbuf::Result<devbuf::zarr::ZarrArray> {
    use devbuf::zarr::ZarrArray;
    if !source.contains("://") {
        return ZarrArray::open(source);
    }
    #[cfg(feature = "object_store")]
    {
        ZarrArray::open(devbuf::zarr::Location::Url(
            source.to_string(),
            devbuf::zarr::object_store::ObjectStoreOptions::default(),
        ))
    }
    #[cfg(not(feature = "object_store"))]
    Err(devbuf::Error::InvalidArgument(format!(
        "{source} is a URL: build with --features zarr,object_store,flight to read object stores"
    )))
}
