#!/usr/bin/env bash
# Regenerates the PTX that devbuf ships for its device kernels.
#
#   scripts/build-kernels.sh            # uses $NVCC, else nvcc on PATH, else /usr/local/cuda/bin/nvcc
#
# Each crates/devbuf-core/src/cuda/kernels/NAME.cu becomes .../kernels/ptx/NAME.ptx, prefixed with a line
# that records the SHA-256 of the source it came from. A host test (tests/kernels_ptx.rs)
# fails when a source changed without its PTX being regenerated.
#
# The PTX targets compute_75 (the oldest architecture CUDA 13 supports) and is JIT-compiled
# by the driver for the GPU at hand, so no toolkit is needed at run time. Build with the
# CUDA 13.0 nvcc (PTX ISA 9.0: loads on drivers for CUDA 13.0 and newer). A matching
# nvcc can be installed without a GPU from PyPI:
#   pip download --no-deps nvidia-cuda-nvcc==13.0.* nvidia-cuda-crt==13.0.* nvidia-nvvm==13.0.* \
#       nvidia-cuda-runtime==13.0.* nvidia-cuda-cccl==13.0.*   (unzip them into one folder)
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
if [ ! -x "$NVCC" ]; then
    echo "nvcc not found (set NVCC=/path/to/nvcc)" >&2
    exit 1
fi
"$NVCC" --version | tail -2
ARCH="${KERNEL_ARCH:-compute_75}"
cd crates/devbuf-core
mkdir -p src/cuda/kernels/ptx
for src in src/cuda/kernels/*.cu; do
    name="$(basename "$src" .cu)"
    out="src/cuda/kernels/ptx/$name.ptx"
    tmp="$(mktemp)"
    "$NVCC" -ptx -O3 -arch="$ARCH" -std=c++17 -lineinfo -o "$tmp" "$src"
    # Drop the absolute path nvcc records for -lineinfo so builds are reproducible.
    sed -i -E 's#^(\s*\.file\s+[0-9]+\s+)"[^"]*/(src/cuda/kernels/[^"]+)"#\1"\2"#' "$tmp"
    hash="$(sha256sum "$src" | cut -d' ' -f1)"
    { echo "// devbuf-source-sha256: $hash"; echo "// devbuf-source: $src"; cat "$tmp"; } > "$out"
    rm -f "$tmp"
    echo "built $out"
done
