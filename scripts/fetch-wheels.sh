#!/usr/bin/env bash
# Downloads the wheels that the GPU machine lacks for `scripts/bench_peers.py zarr`
# (zarr-python 3 and its needs, nvCOMP's Python binding), for CPython 3.12 on
# manylinux x86_64, into DIR (default: .whl in the repo root).
#
#     scripts/fetch-wheels.sh [DIR]
#
# Not fetched here: nvidia-libnvcomp-cu13 (the ~43 MB native library wheel that the
# binding needs, exact version below); it is put into the same folder separately. The
# GPU machine already has numpy 2.x, pyyaml (donfig's need), packaging, cupy, tensorstore.
# crc32c and msgspec are not needed: zarr 3.1 uses google-crc32c, and nothing here
# imports msgspec.
#
# The nvCOMP binding ships its extension for seven Pythons (1.8 MB each); the copy kept
# here holds only the CPython 3.12 one (4.2 MB -> 0.8 MB), with its RECORD rewritten.
# Set KEEP_FULL_NVCOMP=1 to keep the wheel as published.
#
# On the GPU machine (everything carried must stay under 64 MiB):
#     python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#         --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/.whl}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

# name==version; one version of each. typing_extensions: zarr wants >= 4.12, and the
# GPU machine's version is not known; the wheel is 45 kB.
WHEELS=(
  zarr==3.1.6
  numcodecs==0.16.6
  donfig==0.8.1.post1
  google-crc32c==1.9.0
  typing_extensions==4.16.0
  nvidia-nvcomp-cu13==6.0.0.12
)
LIBNVCOMP=nvidia-libnvcomp-cu13==6.0.0.12   # what nvidia-nvcomp-cu13 6.0.0.12 requires

PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$p")
done

# Keep the folder ignored by git when it is inside the repo.
if [[ "$DIR" == "$ROOT"/* ]] && ! git -C "$ROOT" check-ignore -q "$DIR" 2>/dev/null; then
  exclude=$(git -C "$ROOT" rev-parse --git-path info/exclude)
  [[ "$exclude" = /* ]] || exclude="$ROOT/$exclude"
  mkdir -p "$(dirname "$exclude")"
  echo "/${DIR#"$ROOT"/}/" >>"$exclude"
  echo "added /${DIR#"$ROOT"/}/ to $exclude"
fi

for spec in "${WHEELS[@]}"; do
  name=${spec%%==*}
  ver=${spec#*==}
  norm=$(echo "$name" | tr '-' '_' | tr '[:upper:]' '[:lower:]')
  # One version of each: drop other versions of this distribution left from earlier runs.
  for old in "$DIR"/*.whl; do
    [[ -e "$old" ]] || continue
    base=$(basename "$old")
    oname=$(echo "${base%%-*}" | tr '[:upper:]' '[:lower:]')
    over=$(echo "$base" | cut -d- -f2)
    if [[ "$oname" == "$norm" && "$over" != "$ver" ]]; then
      echo "removing $base (want $ver)"
      rm -f "$old"
    fi
  done
  # The slimmed nvCOMP wheel no longer matches the index's hash: keep it rather than fetch again.
  slim=$(ls "$DIR"/nvidia_nvcomp_cu13-"$ver"-*.whl 2>/dev/null | head -1 || true)
  if [[ "$name" == nvidia-nvcomp-cu13 && -n "$slim" && "${KEEP_FULL_NVCOMP:-0}" != 1 ]] \
     && ! unzip -Z1 "$slim" | grep '\.so$' | grep -qv 'cpython-312-'; then
    continue
  fi
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLATFORMS[@]}" -d "$DIR" "$spec"
done

if [[ "${KEEP_FULL_NVCOMP:-0}" != 1 ]]; then
  python3 - "$DIR"/nvidia_nvcomp_cu13-6.0.0.12-*.whl <<'EOF'
import base64, hashlib, os, re, sys, zipfile
for path in sys.argv[1:]:
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        drop = [n for n in names if re.search(r"\.cpython-(?!312-)[^/]*\.so$", n)]
        if not drop:
            print(f"{os.path.basename(path)}: already CPython 3.12 only")
            continue
        keep = {n: z.read(n) for n in names if n not in drop}
        infos = {n: z.getinfo(n) for n in keep}
    rec = next(n for n in keep if n.endswith(".dist-info/RECORD"))
    lines = []
    for n, data in keep.items():
        if n == rec:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{n},sha256={digest},{len(data)}")
    lines.append(f"{rec},,")
    keep[rec] = ("\n".join(lines) + "\n").encode()
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for n, data in keep.items():
            info = infos[n]
            zi = zipfile.ZipInfo(n, date_time=info.date_time)
            zi.external_attr = info.external_attr
            zi.compress_type = zipfile.ZIP_DEFLATED
            out.writestr(zi, data)
    before = os.path.getsize(path)
    os.replace(tmp, path)
    print(f"{os.path.basename(path)}: kept the CPython 3.12 extension only, dropped "
          f"{len(drop)} others ({before / 1e6:.1f} MB -> {os.path.getsize(path) / 1e6:.1f} MB)")
EOF
fi

echo
echo "wheels in $DIR:"
for w in "$DIR"/*.whl; do
  needs=$(unzip -p "$w" '*.dist-info/METADATA' | { grep '^Requires-Dist' || true; } \
          | { grep -v 'extra ==' || true; } | sed 's/^Requires-Dist: //' | paste -sd, - \
          | sed 's/,/, /g')
  printf '  %-88s %7d KiB  needs: %s\n' "$(basename "$w")" "$(($(stat -c %s "$w") / 1024))" \
    "${needs:-nothing}"
done

lib=$(ls "$DIR"/nvidia_libnvcomp_cu13-6.0.0.12-*.whl 2>/dev/null | head -1 || true)
if [[ -n "$lib" ]]; then
  echo "$LIBNVCOMP: present ($(basename "$lib"))"
else
  echo "$LIBNVCOMP: NOT in $DIR yet (fetched separately; nvidia-nvcomp-cu13 needs exactly this)"
fi
total=$(du -cb "$DIR"/*.whl | tail -1 | cut -f1)
echo "total: $((total / 1024)) KiB in $(ls "$DIR"/*.whl | wc -l) wheels (the carry limit is 64 MiB for the whole tree)"
