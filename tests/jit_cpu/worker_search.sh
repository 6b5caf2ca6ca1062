#!/usr/bin/env bash
# worker_search.sh PROGRAM TC_WORKER -- where a program finds tc-worker
# (worker.c's program_find): beside it, one folder up, else installed; a
# candidate that others may write is passed over; with none, workers are
# forked. PROGRAM is linked with libtc.a (so the search starts from the
# program's own folder) and compiles a kernel under the settings below.
set -uo pipefail
prog=$1 worker=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/sub"
cp "$prog" "$dir/sub/prog"
fails=0

# run NAME WANT [UNWANTED]: the compile log must hold WANT (and not UNWANTED)
run() {
  local name=$1 want=$2 unwanted=${3:-} log
  log=$(TC_LOG=compile TC_COMPILE=1 TC_HOT=1 TC_ASYNC=0 TC_CACHE=0 \
        "$dir/sub/prog" 2>&1 >/dev/null)
  local rc=$?
  if [ $rc -ne 0 ] || ! grep -q -- "$want" <<<"$log" ||
     { [ -n "$unwanted" ] && grep -q -- "$unwanted" <<<"$log"; }; then
    echo "FAIL $name (exit $rc): want \"$want\"${unwanted:+, not \"$unwanted\"}"
    sed 's/^/  | /' <<<"$log" | head -20
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}

installed=$(strings "$prog" | grep -m1 '/libexec/tc/tc-worker$' || true)
if [ -n "$installed" ] && [ -e "$installed" ]; then
  echo "skip none: a tc-worker is installed at $installed"
else
  run "none: forked" "started (fork"
fi
cp "$worker" "$dir/tc-worker"
chmod 0755 "$dir/tc-worker"
run "one folder up" "started (exec"
chmod 0775 "$dir/tc-worker"
run "group-writable: passed over" \
  "passing over $dir/sub/../tc-worker: $dir/tc-worker is writable by group or others" \
  "started (exec"
cp "$worker" "$dir/sub/tc-worker"
chmod 0755 "$dir/sub/tc-worker"
run "beside it, first" "started (exec" "passing over"
[ $fails -eq 0 ]
