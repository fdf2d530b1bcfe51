#!/usr/bin/env bash
# Builds the CPU emulator of the CUDA driver and of devbuf's kernels:
#   scripts/emu/build.sh [OUT_DIR]      (default target/emu; needs g++ >= 12 and cuda.h)
# It compiles src/cuda/kernels/*.cu as C++ (shim.h), so it always runs the kernels as
# they are in the tree. CUDA_INCLUDE: a directory with cuda.h (default: the CUDA 13
# toolkit's include directory if found). EMU_ASAN=0 builds without AddressSanitizer.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/target/emu}"
mkdir -p "$out"
inc="${CUDA_INCLUDE:-}"
if [ -z "$inc" ]; then
    for d in /opt/cuda13/nvidia/cu13/include /usr/local/cuda/include; do
        if [ -f "$d/cuda.h" ]; then inc="$d"; break; fi
    done
fi
if [ -z "$inc" ]; then echo "cuda.h not found (set CUDA_INCLUDE)" >&2; exit 1; fi
flags=(-std=c++20 -O1 -g -fPIC -Wall -Wno-unused-function -Wno-unused-variable -Wno-unknown-pragmas)
if [ "${EMU_ASAN:-1}" = 1 ]; then flags+=(-fsanitize=address -fno-omit-frame-pointer); fi
objs=()
for src in emu.cpp fake_cuda.cpp k_compare.cpp k_fill.cpp k_equal.cpp k_byteswap.cpp k_strided.cpp k_cast.cpp k_shuffle.cpp k_crc32.cpp; do
    obj="$out/${src%.cpp}.o"
    extra=()
    case "$src" in k_*) extra=(-include "$here/shim.h" -I "$here");; *) extra=(-I "$here" -I "$inc");; esac
    g++ "${flags[@]}" "${extra[@]}" -c "$here/$src" -o "$obj" &
    objs+=("$obj")
done
wait
g++ "${flags[@]}" -shared -o "$out/libcuda.so" "${objs[@]}" -ldl
ln -sf libcuda.so "$out/libcuda.so.1"
echo "built $out/libcuda.so"
