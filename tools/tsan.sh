#!/usr/bin/env bash
# tsan.sh [BUILD] -- the tests that share tc between threads, built with
# ThreadSanitizer and run in both modes: test_threads (the API's threading
# contract: tensors shared, released on other threads, lazy ones of compile
# mode included), test_trace (the kernel table asked from many threads),
# test_lock (the trace lock's bias revoked under contention),
# test_worker (the compile worker pool, and tc-worker, which it starts),
# test_exit (exit() on one thread while another runs ops: the exit-time
# destructors against a live thread), test_index on two threads (the
# CPU scatter_add's blocks, and the flag a bad index sets, shared by the
# pool's threads) and test_cuda_traced with background
# compiles (NVRTC on the compile thread, through the fake driver, whose
# fibers are annotated for ThreadSanitizer). Prints each run's data races
# and exits 1 when any was found.
# Not part of tests/run-all.sh (the build takes minutes here); run it after
# a change to locking, refcounts, scopes or the compile path. BUILD
# defaults to build-tsan.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-tsan}
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" -Dbuildtype=debugoptimized -Db_sanitize=thread \
    -Db_lundef=false >/dev/null || exit 2
fi
fake=tests/jit_cuda/fake
ninja -C "$dir" tc-worker tests/test_threads tests/test_trace tests/test_lock \
  tests/test_worker tests/test_exit tests/test_index tests/test_cuda_traced \
  $fake/libcuda.so.1 $fake/libnvrtc.so.13 $fake/libcublas.so.13 >/dev/null || { echo "tsan.sh: build failed"; exit 2; }
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0} TC_CACHE=0
races=0
run() {   # run NAME ENV... -- BINARY
  local name=$1 log n; shift
  log=$(mktemp /tmp/tc-tsan.XXXXXX)
  env "$@" >"$log" 2>&1
  local rc=$?
  n=$(grep -c 'WARNING: ThreadSanitizer' "$log")
  echo "$name: exit $rc, $n data race(s)"
  if [ "$n" -gt 0 ] || [ "$rc" -ne 0 ]; then
    grep -A3 '^SUMMARY\|^  \(Read\|Write\|Atomic\|Previous\)' "$log" | head -40
    races=$((races + n + (rc != 0)))
  fi
  rm -f "$log"
}
run "threads, eager"    TC_COMPILE=0 "$dir/tests/test_threads"
run "threads, compiled" TC_COMPILE=1 "$dir/tests/test_threads"
run "trace"             TC_ASYNC=0 "$dir/tests/test_trace"
run "lock"              "$dir/tests/test_lock"
run "worker"            TC_ASYNC=0 "$dir/tests/test_worker"
run "exit"              "$dir/tests/test_exit"
run "index, 2 threads"  TC_THREADS=2 "$dir/tests/test_index"
run "cuda, async"       TC_ASYNC=1 TC_CACHE=0 TC_COMPILE=1 TC_HOT=1 \
  TC_RECOMPILE_LIMIT=2 LD_LIBRARY_PATH="$dir/$fake" "$dir/tests/test_cuda_traced"
[ "$races" -eq 0 ]
