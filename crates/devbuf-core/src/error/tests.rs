//! Unit tests of the error type.

use super::helpers::fmt_axes;
use super::*;

#[test]
fn range_checks() {
    assert_eq!(check_range("x", 0, 0, 0), Ok(0));
    assert_eq!(check_range("x", 3, 4, 7), Ok(7));
    assert!(check_range("x", 3, 5, 7).is_err());
    assert!(check_range("x", 8, 0, 7).is_err());
    let e = check_range("x", usize::MAX, 2, 7).unwrap_err();
    assert!(e.to_string().contains("overflow"), "{e}");
}

#[test]
fn long_messages_keep_their_ends_and_control_characters_are_escaped() {
    let long = format!("start {} end", "x".repeat(100_000));
    let shown = Error::invalid(&long).to_string();
    assert!(shown.len() < MAX_MESSAGE_CHARS + 100, "{}", shown.len());
    assert!(shown.starts_with("invalid argument: start xxx"), "{shown}");
    assert!(shown.ends_with("xxx end"), "{shown}");
    assert!(shown.contains("characters left out"), "{shown}");
    // Exactly at the bound: shown whole.
    let at = "y".repeat(MAX_MESSAGE_CHARS);
    assert_eq!(
        Error::Malformed(at.clone()).to_string(),
        format!("malformed input: {at}")
    );
    // Multi-byte characters are cut at character boundaries.
    let wide = "é".repeat(3 * MAX_MESSAGE_CHARS);
    assert!(Error::invalid(&wide).to_string().ends_with("éé"));
    let e = Error::io("reading", "a\nb\u{1b}[31m\0");
    assert_eq!(
        e.to_string(),
        "I/O error during reading: a\\nb\\u{1b}[31m\\u{0}"
    );
}

#[test]
fn context_keeps_the_kind_and_does_not_repeat_the_prefix() {
    let e = Error::invalid("slice step must be positive").context("axis 0");
    assert_eq!(
        e.to_string(),
        "invalid argument: axis 0: slice step must be positive"
    );
    let e = Error::Malformed("bad".into()).context("zarr.json");
    assert_eq!(e, Error::Malformed("zarr.json: bad".into()));
    let e = Error::out_of_bounds("slice", 1, 2, 2).context("ignored");
    assert!(matches!(e, Error::OutOfBounds { .. }));
}

#[test]
fn axes_lists_are_bounded() {
    assert_eq!(fmt_axes(&[1u64, 2, 3]), "[1, 2, 3]");
    assert_eq!(fmt_axes::<u64>(&[]), "[]");
    let many: Vec<u64> = (0..10_000).collect();
    assert_eq!(
        fmt_axes(&many),
        "[0, 1, 2, 3, 4, 5, 6, ..., 9999] (10000 axes)"
    );
    let eight: Vec<u64> = (0..8).collect();
    assert_eq!(fmt_axes(&eight), "[0, 1, 2, 3, 4, 5, 6, 7]");
}

#[test]
fn io_errors_keep_their_kind_and_source() {
    use std::error::Error as _;
    use std::io;
    let cases = [
        (io::ErrorKind::NotFound, ErrorKind::NotFound),
        (io::ErrorKind::PermissionDenied, ErrorKind::PermissionDenied),
        (io::ErrorKind::TimedOut, ErrorKind::Timeout),
        (io::ErrorKind::Unsupported, ErrorKind::Unsupported),
        (io::ErrorKind::BrokenPipe, ErrorKind::Io),
    ];
    for (io_kind, kind) in cases {
        let e = Error::from(io::Error::new(io_kind, "boom"));
        assert_eq!(e.kind(), kind, "{io_kind:?}: {e:?}");
        assert!(e.to_string().contains("boom"), "{e}");
        let src = e.source().expect("a source");
        let io = src
            .downcast_ref::<io::Error>()
            .expect("the io::Error itself");
        assert_eq!(io.kind(), io_kind);
    }
    let e = Error::from_io(
        "opening a zarr array",
        "/nowhere: no such file",
        io::Error::from(io::ErrorKind::NotFound),
    );
    assert_eq!(
        e.to_string(),
        "not found: opening a zarr array: /nowhere: no such file"
    );
    // An io::Error that wraps a devbuf error gives it back.
    let ours = Error::out_of_bounds("x", 1, 2, 2);
    assert_eq!(Error::from(io::Error::other(ours.clone())), ours);
    // Clones share the source; equality ignores it.
    let c = e.clone();
    assert_eq!(c, e);
    assert!(c.source().is_some());
    assert_eq!(
        e,
        Error::not_found("opening a zarr array: /nowhere: no such file")
    );
}

#[test]
fn arrow_errors_convert_both_ways() {
    use arrow_schema::ArrowError;
    use std::error::Error as _;
    let e = Error::from(ArrowError::NotYetImplemented("float8".into()));
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.source().unwrap().downcast_ref::<ArrowError>().is_some());
    let e = Error::from(ArrowError::InvalidArgumentError("bad column".into()));
    assert_eq!(e, Error::invalid("bad column"));
    assert_eq!(
        Error::from(ArrowError::ParseError("junk".into())).kind(),
        ErrorKind::Malformed
    );
    let e = Error::from(ArrowError::IoError(
        "gone".into(),
        std::io::Error::from(std::io::ErrorKind::NotFound),
    ));
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(
        e.source()
            .unwrap()
            .downcast_ref::<std::io::Error>()
            .is_some()
    );
    let e = Error::from(ArrowError::SchemaError("no field x".into()));
    assert_eq!(e.kind(), ErrorKind::Arrow);
    assert!(e.to_string().contains("no field x"), "{e}");
    assert!(e.source().unwrap().downcast_ref::<ArrowError>().is_some());

    // Into ArrowError and back: the same error, reachable through source().
    let ours = Error::not_found("key c/0").with_source(std::io::Error::other("404"));
    let arrow = ArrowError::from(ours.clone());
    let inner = arrow.source().expect("the devbuf error");
    assert_eq!(inner.downcast_ref::<Error>(), Some(&ours));
    assert!(inner.source().is_some(), "and its own source");
    let back = Error::from(arrow);
    assert_eq!(back, ours);
    assert_eq!(back.kind(), ErrorKind::NotFound);
    assert!(back.source().is_some());
}

#[test]
fn sources_survive_context_and_only_some_variants_take_one() {
    use std::error::Error as _;
    let e = Error::io("reading", "x")
        .with_source(std::io::Error::other("cause"))
        .context("key c/0");
    assert_eq!(e.to_string(), "I/O error during reading: key c/0: x");
    assert_eq!(e.source().unwrap().to_string(), "cause");
    let e = Error::invalid("x").with_source(std::io::Error::other("cause"));
    assert!(e.source().is_none());
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let oom = Error::Driver {
        call: "cuMemAlloc_v2",
        code: 2,
        name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
        description: "out of memory".into(),
    };
    assert_eq!(oom.kind(), ErrorKind::OutOfMemory);
    assert_eq!(
        Error::unavailable("no driver").kind(),
        ErrorKind::CudaUnavailable
    );
}
