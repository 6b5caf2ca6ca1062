#!/usr/bin/env bash
# The whole test suite: build (release) and run every test, then the same
# suite built with AddressSanitizer + UndefinedBehaviorSanitizer, then a
# program written only against the public contract, compiled and linked
# through the installed tc.pc. Ends with "N passed, N failed, N skipped".
#   bash tests/run-all.sh [--no-sanitize]
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh || { echo "dependency install failed"; exit 1; }

passed=0 failed=0 skipped=0
failures=$(mktemp)   # the end of each failed test's output, shown last
count() {   # tally meson's JSON test log of build dir $1
  local log="$1/meson-logs/testlog.json"
  [ -f "$log" ] || { failed=$((failed + 1)); return; }
  read -r p f s < <(python3 - "$log" "$1" "$failures" <<'PY'
import json, sys
p = f = s = 0
with open(sys.argv[3], "a") as out:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if r["result"] in ("OK", "EXPECTEDFAIL"): p += 1
        elif r["result"] == "SKIP": s += 1
        else:
            f += 1
            tail = (r.get("stdout") or "").splitlines()[-40:]
            out.write("-- %s: %s %s (exit %s, %.1f s); its last lines:\n"
                      % (sys.argv[2], r["name"], r["result"],
                         r.get("returncode"), r.get("duration") or 0))
            out.write("".join("   | " + t + "\n" for t in tail))
print(p, f, s)
PY
)
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
}

suite() {   # suite NAME BUILDDIR [meson setup args...]
  local name="$1" dir="$2"; shift 2
  echo "== $name =="
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" --werror "$@" >/dev/null || { failed=$((failed + 1)); return; }
  fi
  if ! ninja -C "$dir" >/dev/null; then
    ninja -C "$dir" | tail -30
    failed=$((failed + 1)); return
  fi
  meson test -C "$dir" --print-errorlogs --num-processes 2 | \
    grep -E '^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):' || true
  count "$dir"
}

# Compiled kernels shared by both suites (and by the tests of each): a
# kernel store for the random programs and the CUDA host-execution tests
# (TC_TEST_STORE), and hostexec's gcc objects and NVRTC verdicts
# (TC_TEST_CUDA_CACHE), each keyed by the exact text it was made from. The
# sanitized suite runs the same programs, so it loads what release made.
shared=$(mktemp -d)
trap 'rm -rf "$shared" "$failures"' EXIT
export TC_TEST_STORE="$shared/store" TC_TEST_CUDA_CACHE="$shared/cuda"
mkdir -p "$TC_TEST_STORE" "$TC_TEST_CUDA_CACHE"

suite "release" build
if [ "${1:-}" != "--no-sanitize" ]; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp
  suite "asan+ubsan" build-san -Dbuildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
fi

# The contract: install to a scratch prefix and build a program that sees
# only tc.h and tc.pc.
echo "== contract program via pkg-config =="
prefix=$(mktemp -d)
if meson install -C build --destdir "$prefix" >/dev/null 2>&1; then
  pcdir=$(dirname "$(find "$prefix" -name tc.pc | head -1)")
  root="$prefix/usr/local"
  flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-variable=prefix="$root" --cflags --libs tc)
  libdir=$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-variable=prefix="$root" --variable=libdir tc)
  if cc -std=c11 -Wall -Wextra -Werror tests/contract/contract.c -o "$prefix/contract" $flags -lm \
     && LD_LIBRARY_PATH="$libdir" "$prefix/contract"; then
    passed=$((passed + 1)); echo "contract: OK"
  else
    failed=$((failed + 1)); echo "contract: FAIL"
  fi
else
  failed=$((failed + 1)); echo "contract: install FAIL"
fi
rm -rf "$prefix"

if [ -s "$failures" ]; then
  echo
  echo "== failed tests =="
  cat "$failures"
fi

echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
