//! What every example's `main` shares: errors are printed for a person to read
//! (`Display`: "error: cannot open ...", not `Debug`'s `Malformed("...")`).

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
