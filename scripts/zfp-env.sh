# Sourced (`. scripts/zfp-env.sh`): what the `zfp` feature needs to build, from PyPI
# when the machine lacks it. zfp-sys builds zfp's C library with CMake and generates
# its bindings with bindgen, which loads libclang. With `cmake` on the PATH and a
# libclang that bindgen finds (e.g. Debian's `cmake libclang-dev`) this does nothing;
# otherwise it installs the `cmake` and `libclang` wheels into $CARGO_TARGET_DIR/tools
# (or target/tools) and exports PATH, LIBCLANG_PATH and BINDGEN_EXTRA_CLANG_ARGS (the
# libclang wheel has no C headers: the C compiler's are used). .ci/run sources it before
# `cargo clippy --all-features` and the zfp test.
_zfp_tools="${CARGO_TARGET_DIR:-target}/tools/zfp-venv"
_zfp_have_clang() {
    [ -n "${LIBCLANG_PATH:-}" ] && return 0
    # (libclang itself, not libclang-cpp.)
    ldconfig -p 2>/dev/null | grep -q 'libclang\(-[0-9][0-9.]*\)\?\.so' && return 0
    ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
        > /dev/null 2>&1
}
if ! command -v cmake > /dev/null 2>&1 || ! _zfp_have_clang; then
    if [ ! -x "$_zfp_tools/bin/cmake" ] || [ ! -d "$_zfp_tools/lib" ]; then
        python3 -m venv "$_zfp_tools"
        "$_zfp_tools/bin/pip" install --quiet --disable-pip-version-check \
            "cmake==4.4.5" "libclang==18.1.1"
    fi
    export PATH="$(cd "$_zfp_tools/bin" && pwd):$PATH"
    if ! _zfp_have_clang; then
        LIBCLANG_PATH="$(dirname "$(find "$_zfp_tools" -name 'libclang*.so*' | head -1)")"
        LIBCLANG_PATH="$(cd "$LIBCLANG_PATH" && pwd)"
        export LIBCLANG_PATH
        export BINDGEN_EXTRA_CLANG_ARGS="-I$(cc -print-file-name=include)"
    fi
fi
unset -f _zfp_have_clang
unset _zfp_tools
