#!/usr/bin/env bash
# gpu-pack.sh [OUT] -- pack what bench/gpu-check.sh needs on a GPU machine
# that has a driver, nvcc and PyTorch but no package registry and none of
# tc's Debian libraries: one archive (default gpu-pack/tc-gpu.tar.xz under
# the repository, which git ignores) holding
#   - build-gpu/: a release build without OpenBLAS (the matmul is tc's own
#     kernel either way; OpenBLAS only adds 36 MB), its objects left out;
#   - lib/: every shared library its programs load that is not glibc's own
#     (libgccjit, which libtc opens at run time, with its gmp/mpfr/mpc/isl,
#     xxhash, cmocka, ...);
#   - gcc12/: what libgccjit 12's driver runs and links with besides `as`
#     and `ld` (collect2, crtbeginS.o, crtendS.o, libgcc.a, libgcc_s.so),
#     for a machine whose gcc is another version;
#   - meson/: Debian's meson (run with python3), for `meson test`;
#   - root: the repository's path here, which the build's paths name.
# gpu-check.sh unpacks it when it finds it (see there). Carry the archive
# (about 15 MB) with the working tree: the device tool's `carry` names
# gpu-pack. The archive is rebuilt from scratch each time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/gpu-pack/tc-gpu.tar.xz}
build=$root/build-gpu
mkdir -p "$(dirname "$out")"

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --werror -Dblas=disabled >/dev/null
fi
ninja -C "$build" >/dev/null

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build-gpu" "$stage/lib" "$stage/gcc12"

# The build, without what only a rebuild reads (objects, dependency files).
(cd "$build" && find . -name '*.p' -prune -o -type f ! -name '*.o' -print0 |
   xargs -0 cp --parents -t "$stage/build-gpu")

# Every shared library the programs and libtc load, glibc's own excepted,
# and libgccjit, which libtc opens at run time (src/jit_cpu/gccjit_api.h),
# with the libraries it loads. The build needs glibc 2.34; libgccjit needs
# Debian 12's 2.36: on an older glibc it does not load, and tc runs CPU
# regions eagerly, saying so once (the CUDA path is unaffected).
glibc='^(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so'
gccjit=$(ldconfig -p | awk '$1 == "libgccjit.so.0" { print $NF; exit }')
[ -n "$gccjit" ] || { echo "gpu-pack: libgccjit.so.0 not found"; exit 1; }
cp -L "$gccjit" "$stage/lib/libgccjit.so.0"
{ find "$build" -name '*.p' -prune -o -type f -perm -u+x -print; echo "$gccjit"; } |
  while read -r f; do ldd "$f" 2>/dev/null || true; done |
  awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
  while read -r name path; do
    [[ $name =~ $glibc ]] && continue
    [[ $path == "$build"/* ]] && continue   # the build's own (libtc, fakes)
    cp -L "$path" "$stage/lib/$name"
  done

# libgccjit's link step (what strace shows it open and run besides as/ld).
gcc12=/usr/lib/gcc/x86_64-linux-gnu/12
for f in collect2 crtbeginS.o crtendS.o libgcc.a libgcc_s.so; do
  cp -L "$gcc12/$f" "$stage/gcc12/"
done

# Meson itself (Debian's, pure Python), to run the suite: a build folder
# answers only to the meson version that configured it, and the machine
# may have none.
mkdir -p "$stage/meson"
cp /usr/bin/meson "$stage/meson/meson"
(cd /usr/lib/python3/dist-packages &&
   find mesonbuild -name __pycache__ -prune -o -type f -print0 |
   xargs -0 cp --parents -t "$stage/meson")

echo "$root" > "$stage/root"
tar -C "$stage" -cJf "$out" .
echo "gpu-pack: $out ($(du -h "$out" | cut -f1)); carry $(dirname "${out#"$root"/}")"
