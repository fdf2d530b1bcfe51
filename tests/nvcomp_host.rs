//! nvCOMP without a GPU: the loader's errors (never a panic) and the host-side checks
//! of batch ranges. With `DEVBUF_NVCOMP_LIB` pointing at a real `libnvcomp.so.6` the
//! host-only queries (version, alignments, output bounds) are checked too; they need
//! no GPU.

// One-chunk batches are written as `&[a..b]`: a slice of one range, as meant.
#![allow(clippy::single_range_in_vec_init)]

use std::ops::Range;
use std::process::Command;

use devbuf::__test::{check_compress_ranges, check_decompress_ranges};
use devbuf::cuda::nvcomp::{self, GpuCodec, Nvcomp};

/// Set in the child process that runs a test under a chosen environment.
const CHILD: &str = "DEVBUF_NVCOMP_TEST_CHILD";

/// Runs test `name` of this binary again in a child process with `DEVBUF_NVCOMP_LIB`
/// set to `lib` (the library's outcome is cached per process), and checks that it
/// passed.
fn in_child(name: &str, lib: &str) {
    in_child_with(name, &[("DEVBUF_NVCOMP_LIB", lib)]);
}

fn in_child_with(name: &str, env: &[(&str, &str)]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(env.iter().copied())
        .output()
        .expect("the test binary runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child {name} failed:\n{text}");
    assert!(text.contains("1 passed"), "child ran no test:\n{text}");
}

#[test]
fn a_variable_pointing_nowhere_is_an_error_naming_it() {
    if std::env::var_os(CHILD).is_none() {
        return in_child(
            "a_variable_pointing_nowhere_is_an_error_naming_it",
            "/nonexistent/libnvcomp.so.6",
        );
    }
    assert!(nvcomp::library().is_err());
    let e = nvcomp::library().unwrap_err();
    assert_eq!(e.kind(), devbuf::ErrorKind::CudaUnavailable, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("/nonexistent/libnvcomp.so.6"), "{msg}");
    assert!(msg.contains("DEVBUF_NVCOMP_LIB"), "{msg}");
    assert!(msg.contains("no such file"), "{msg}");
    // Only the variable's path was tried: not the linker, not the wheels.
    assert!(!msg.contains("dynamic linker"), "{msg}");
    let reason = match nvcomp::library() {
        Err(devbuf::Error::CudaUnavailable { reason }) => Some(reason),
        _ => None,
    };
    assert_eq!(
        reason.as_deref(),
        Some(msg.trim_start_matches("CUDA is unavailable: "))
    );
    // The batches refuse to exist, with the same reason, before touching CUDA.
    // (No context can be made here; the reason is checked through `library`.)
    println!("reason: {msg}");
}

#[test]
fn a_directory_without_the_library_lists_every_place_tried() {
    if std::env::var_os(CHILD).is_none() {
        let dir = std::env::temp_dir().join(format!("devbuf-nvcomp-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        in_child(
            "a_directory_without_the_library_lists_every_place_tried",
            dir.to_str().unwrap(),
        );
        let _ = std::fs::remove_dir(&dir);
        return;
    }
    let dir = std::env::var("DEVBUF_NVCOMP_LIB").unwrap();
    let msg = nvcomp::library().unwrap_err().to_string();
    for sub in [
        "libnvcomp.so.6",
        "lib64/libnvcomp.so.6",
        "lib/libnvcomp.so.6",
        "nvidia/libnvcomp/lib64/libnvcomp.so.6",
    ] {
        assert!(
            msg.contains(&format!("{dir}/{sub}")),
            "{sub} missing from: {msg}"
        );
    }
}

#[test]
fn the_wheel_layout_under_pythonpath_is_tried() {
    if std::env::var_os(CHILD).is_none() {
        // A site-packages directory holding something that is not a library where the
        // wheel puts libnvcomp.so.6.
        let site = std::env::temp_dir().join(format!("devbuf-nvcomp-site-{}", std::process::id()));
        let lib64 = site.join("nvidia/libnvcomp/lib64");
        std::fs::create_dir_all(&lib64).unwrap();
        std::fs::write(lib64.join("libnvcomp.so.6"), b"not a library").unwrap();
        in_child_with(
            "the_wheel_layout_under_pythonpath_is_tried",
            &[
                ("DEVBUF_NVCOMP_LIB", ""),
                ("PYTHONPATH", site.to_str().unwrap()),
            ],
        );
        let _ = std::fs::remove_dir_all(&site);
        return;
    }
    match nvcomp::library() {
        // A system copy of nvCOMP found through the dynamic linker comes first.
        Ok(lib) => println!("found {} first", lib.path().display()),
        Err(e) => {
            let msg = e.to_string();
            let site = std::env::var("PYTHONPATH").unwrap();
            let wheel = format!(
                "{site}/nvidia/libnvcomp/lib64/libnvcomp.so.6 [pip wheel nvidia-libnvcomp]: dlopen failed"
            );
            assert!(msg.contains(&wheel), "{msg}");
            assert!(msg.contains("libnvcomp.so.6 [the dynamic linker"), "{msg}");
            assert!(msg.find("dynamic linker") < msg.find(&wheel), "{msg}");
        }
    }
}

#[test]
fn opening_something_else_is_an_error_not_a_panic() {
    let e = Nvcomp::open("/nonexistent/libnvcomp.so.6").unwrap_err();
    assert!(
        e.to_string()
            .contains("/nonexistent/libnvcomp.so.6 is unusable: no such file"),
        "{e}"
    );
    // Not a shared library at all.
    let toml = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let e = Nvcomp::open(toml).unwrap_err().to_string();
    assert!(
        e.contains("dlopen failed") && e.contains("Cargo.toml"),
        "{e}"
    );
    // A shared library that is not nvCOMP (the C library, through the linker).
    let e = Nvcomp::open("libc.so.6").unwrap_err().to_string();
    assert!(e.contains("lacks the symbol nvcompGetProperties"), "{e}");
}

fn ranges(bounds: &[usize]) -> Vec<Range<usize>> {
    bounds.windows(2).map(|w| w[0]..w[1]).collect()
}

#[test]
fn decompress_ranges_are_checked_naming_the_chunk() {
    let z = GpuCodec::Zstd;
    let ins = ranges(&[0, 10, 25, 40]);
    let outs = ranges(&[0, 100, 200, 300]);
    check_decompress_ranges(z, 40, &ins, 300, &outs).unwrap();
    // Any order and gaps are fine; inputs may even repeat.
    check_decompress_ranges(
        z,
        40,
        &[25..40, 0..10, 0..10],
        300,
        &[200..300, 5..50, 60..61],
    )
    .unwrap();
    // An empty batch is valid.
    check_decompress_ranges(z, 0, &[], 0, &[]).unwrap();

    let err = |src_len, ins: &[Range<usize>], dst_len, outs: &[Range<usize>]| {
        check_decompress_ranges(z, src_len, ins, dst_len, outs)
            .unwrap_err()
            .to_string()
    };
    let e = err(40, &ins, 300, &outs[..2]);
    assert!(e.contains("3 input ranges but 2 output ranges"), "{e}");
    let e = err(39, &ins, 300, &outs);
    assert!(
        e.contains("chunk 2: input range 25..40 exceeds the source buffer of 39 bytes"),
        "{e}"
    );
    let e = err(40, &ins, 299, &outs);
    assert!(
        e.contains("chunk 2: output range 200..300 exceeds the destination buffer of 299 bytes"),
        "{e}"
    );
    #[allow(clippy::reversed_empty_ranges)]
    let e = err(40, &[0..10, 12..11], 300, &outs[..2]);
    assert!(e.contains("chunk 1: input range 12..11 is reversed"), "{e}");
    let e = err(40, &[0..10, 10..10], 300, &outs[..2]);
    assert!(e.contains("chunk 1: empty input range"), "{e}");
    let e = err(40, &ins, 300, &[0..100, 150..150, 200..300]);
    assert!(e.contains("chunk 1: empty output range"), "{e}");
    let e = err(40, &ins, 300, &[0..100, 99..200, 200..300]);
    assert!(e.contains("chunks 0 and 1 overlap"), "{e}");
    // Overflowing ends are caught too.
    let e = err(40, &[usize::MAX - 1..usize::MAX], 300, &outs[..1]);
    assert!(
        e.contains("chunk 0") && e.contains("exceeds the source buffer"),
        "{e}"
    );
}

#[test]
fn chunk_size_limits_name_the_limit() {
    let big = GpuCodec::Zstd.max_decompress_chunk_bytes() + 1;
    let e = check_decompress_ranges(GpuCodec::Zstd, 100, &[0..100], big, &[0..big])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("chunk 0") && e.contains(&format!("limit of {}", big - 1)),
        "{e}"
    );
    let e = check_decompress_ranges(GpuCodec::Zstd, big, &[0..big], 100, &[0..100])
        .unwrap_err()
        .to_string();
    assert!(e.contains("compressed bytes exceed"), "{e}");
    // LZ4 and deflate decode chunks up to 4 GiB - 1, GDeflate 4 GiB + 288.
    assert_eq!(GpuCodec::Lz4.max_decompress_chunk_bytes(), (1 << 32) - 1);
    assert_eq!(
        GpuCodec::Deflate.max_decompress_chunk_bytes(),
        (1 << 32) - 1
    );
    assert_eq!(
        GpuCodec::GDeflate.max_decompress_chunk_bytes(),
        (1 << 32) + 288
    );
    for codec in GpuCodec::ALL {
        let max = codec.max_compress_chunk_bytes();
        check_compress_ranges(codec, max, &[0..max], 2 * max, &[0..2 * max]).unwrap();
        let e = check_compress_ranges(codec, max + 1, &[0..max + 1], 4 * max, &[0..4 * max])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("limit of {max} bytes")) && e.contains(&codec.to_string()),
            "{e}"
        );
    }
}

#[test]
fn batches_move_between_threads() {
    fn send<T: Send>() {}
    send::<nvcomp::DecompressBatch>();
    send::<nvcomp::CompressBatch>();
    fn shared<T: Send + Sync>() {}
    shared::<&'static Nvcomp>();
}

#[test]
fn codec_names() {
    let names: Vec<String> = GpuCodec::ALL.iter().map(|c| c.to_string()).collect();
    assert_eq!(names, ["zstd", "lz4", "deflate", "gdeflate"]);
}

/// With a real nvCOMP (no GPU needed): the host-only queries answer sensibly.
#[test]
fn a_real_library_answers_host_queries() {
    let Some(path) = std::env::var_os("DEVBUF_NVCOMP_LIB") else {
        println!("SKIPPED a_real_library_answers_host_queries: DEVBUF_NVCOMP_LIB is not set");
        return;
    };
    if std::env::var_os(CHILD).is_some() {
        return; // a child of another test, with a deliberately wrong path
    }
    let lib = match nvcomp::library() {
        Ok(lib) => lib,
        Err(e) => panic!(
            "DEVBUF_NVCOMP_LIB={} does not load: {e}",
            path.to_string_lossy()
        ),
    };
    assert_eq!(lib.version().0, 6, "{lib:?}");
    assert!(lib.path().ends_with("libnvcomp.so.6"), "{lib:?}");
    assert!(lib.cuda_runtime_version().0 >= 12, "{lib:?}");
    for codec in GpuCodec::ALL {
        for a in [
            lib.decompress_alignment(codec),
            lib.compress_alignment(codec),
        ] {
            for v in [a.input, a.output, a.temp] {
                assert!(v.is_power_of_two() && v <= 256, "{codec}: {a:?}");
            }
        }
        let max = codec.max_compress_chunk_bytes();
        let mut last = 0;
        for n in [1, 1000, 65536, max] {
            let m = lib.max_compressed_chunk_size(codec, n).unwrap();
            assert!(m >= n && m >= last, "{codec}: {n} -> {m}");
            last = m;
        }
        let e = lib.max_compressed_chunk_size(codec, max + 1).unwrap_err();
        assert!(e.to_string().contains("limit"), "{e}");
        println!(
            "{codec}: decompress {:?}, compress {:?}, 64 KiB -> at most {} bytes",
            lib.decompress_alignment(codec),
            lib.compress_alignment(codec),
            lib.max_compressed_chunk_size(codec, 65536).unwrap()
        );
    }
}
