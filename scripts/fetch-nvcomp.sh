#!/usr/bin/env bash
# Fetches nvCOMP 6 (the pip wheel nvidia-libnvcomp-cu13) for devbuf's GPU decompression
# (src/cuda/nvcomp), without installing anything:
#
#   scripts/fetch-nvcomp.sh [REPO_ROOT]
#
# * downloads the wheel into REPO_ROOT/.whl/ (git-ignored through .git/info/exclude);
# * unpacks libnvcomp.so.6 and the C headers into REPO_ROOT/.nvcomp/ (also ignored):
#   .nvcomp/lib64/libnvcomp.so.6 (about 25 MB, the only file a GPU machine needs: it
#   links the CUDA runtime statically and needs only the NVIDIA driver) and
#   .nvcomp/include/ (to check the declarations in src/cuda/nvcomp/sys.rs).
#
# Then, here or on the GPU machine (carry `.nvcomp`):
#   export DEVBUF_NVCOMP_LIB=$PWD/.nvcomp/lib64
set -euo pipefail
ROOT="${1:-$(git rev-parse --show-toplevel)}"
cd "$ROOT"

exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
for d in /.whl/ /.nvcomp/; do
    grep -qxF "$d" "$exclude" 2>/dev/null || echo "$d" >>"$exclude"
done

mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl 'nvidia-libnvcomp-cu13>=6,<7'
whl="$(ls -1 .whl/nvidia_libnvcomp_cu13-6.*.whl | sort -V | tail -1)"
echo "wheel: $whl ($(du -h "$whl" | cut -f1))"

rm -rf .nvcomp
mkdir -p .nvcomp/lib64 .nvcomp/include
unzip -q -o -j "$whl" 'nvidia/libnvcomp/lib64/libnvcomp.so.6' -d .nvcomp/lib64
tmp="$(mktemp -d)"
unzip -q -o "$whl" 'nvidia/libnvcomp/include/*' -d "$tmp"
cp -r "$tmp/nvidia/libnvcomp/include/." .nvcomp/include/
rm -rf "$tmp"
awk '/^#define NVCOMP_VER_(MAJOR|MINOR|PATCH) /{v = v sep $3; sep = "."} END {print "headers: nvCOMP " v}' \
    .nvcomp/include/nvcomp/version.h
echo "library: $ROOT/.nvcomp/lib64/libnvcomp.so.6 ($(du -h .nvcomp/lib64/libnvcomp.so.6 | cut -f1))"
echo "use:     export DEVBUF_NVCOMP_LIB=$ROOT/.nvcomp/lib64"
