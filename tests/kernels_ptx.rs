//! The shipped PTX must have been generated from the kernel sources as they are now.
//! After editing a `crates/devbuf-core/src/cuda/kernels/*.cu`, run `scripts/build-kernels.sh`.

use sha2::{Digest, Sha256};
use std::path::Path;

#[test]
fn every_kernel_source_has_up_to_date_ptx() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/devbuf-core/src/cuda/kernels");
    let mut sources = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("cu") {
            continue;
        }
        sources += 1;
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        let src = std::fs::read(&path).unwrap();
        let hash = format!("{:x}", Sha256::digest(&src));
        let ptx_path = dir.join("ptx").join(format!("{name}.ptx"));
        let ptx = std::fs::read_to_string(&ptx_path).unwrap_or_else(|_| {
            panic!(
                "{} has no PTX: run scripts/build-kernels.sh",
                path.display()
            )
        });
        let first = ptx.lines().next().unwrap_or("");
        assert_eq!(
            first,
            format!("// devbuf-source-sha256: {hash}"),
            "{} changed since its PTX was built: run scripts/build-kernels.sh",
            path.display()
        );
        assert!(
            ptx.contains(".entry"),
            "{} has no kernel entry",
            ptx_path.display()
        );
    }
    assert!(sources > 0, "no kernel sources found");
}

#[test]
fn every_shipped_module_is_a_built_source() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/devbuf-core/src/cuda/kernels");
    for (name, ptx) in devbuf::__test::shipped_ptx() {
        let on_disk = std::fs::read_to_string(dir.join("ptx").join(format!("{name}.ptx"))).unwrap();
        assert_eq!(
            ptx, on_disk,
            "module {name} is compiled from ptx/{name}.ptx"
        );
        assert!(
            dir.join(format!("{name}.cu")).exists(),
            "module {name} has a source"
        );
        // Loadable by a CUDA 13.0 driver: PTX ISA 9.0 or older.
        let version = ptx
            .lines()
            .find_map(|l| l.trim().strip_prefix(".version "))
            .expect("PTX has a .version line");
        let (major, minor) = version.split_once('.').unwrap();
        let v: u32 = major.parse::<u32>().unwrap() * 10 + minor.parse::<u32>().unwrap();
        assert!(
            v <= 90,
            "module {name}: PTX ISA {version} needs a driver newer than CUDA 13.0"
        );
    }
}
