#!/usr/bin/env bash
# The README's demo: install dependencies, build, run the MLP example eagerly
# and with TC_COMPILE=1, with timings, then list the kernel cache.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
iters=${1:-20}
echo "== eager =="
TC_STATS=1 ./build/examples/mlp "$iters"
echo
echo "== TC_COMPILE=1 =="
TC_COMPILE=1 TC_STATS=1 ./build/examples/mlp "$iters"
echo
echo "== kernel cache =="
if [ -x build/tools/tc-dump ]; then
  ./build/tools/tc-dump list
else
  echo "(no kernel cache yet: tracing, fusion and the JIT land in later issues;"
  echo " with TC_COMPILE=1 the program runs through the eager kernels, unchanged)"
fi
