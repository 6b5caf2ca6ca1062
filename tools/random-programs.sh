#!/usr/bin/env bash
# random-programs.sh COUNT [SEED] [JOBS] -- run COUNT random programs from
# seed SEED (default 0) eagerly and compiled, split over JOBS processes
# (default: the number of cores), and print a summary: programs run,
# programs with compiled regions, failures with their seeds. Each failing
# seed is then rerun alone in a fresh process and shrunk; the shrunk
# programs (C-like lines and a standalone C file) go to the output folder.
#
# Environment:
#   TC_BUILD          build folder holding tests/test_random (default build)
#   TC_RANDOM_BIN     the test binary in TC_BUILD/tests (default test_random;
#                     test_random_cuda with TC_TEST_CUDA=host,nvrtc runs
#                     every kernel's CUDA C on the host, tests/jit_cuda)
#   TC_RANDOM_OUT     output folder (default a new /tmp/tc-random.XXXXXX)
#   TC_RANDOM_SHRINK  failing seeds to shrink afterwards (default 10)
#   TC_RANDOM_AVOID   features to leave out (see tests/fuse/randprog.h)
#   TC_RECOMPILE_LIMIT, TC_NODE_LIMIT, TC_HOT, TC_THREADS  passed on to tc
#                     (TC_THREADS defaults to 1 when JOBS fill the cores)
# A process that crashes is restarted after the crashing seed; the crash
# and its seed are listed, and shrunk in fresh processes (--crash).
# Example: tools/random-programs.sh 100000 0 2   (about 2.5 hours here)
set -uo pipefail

count=${1:?usage: random-programs.sh COUNT [SEED] [JOBS]}
seed=${2:-0}
jobs=${3:-$(nproc)}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TC_BUILD:-$root/build}
bin=$build/tests/${TC_RANDOM_BIN:-test_random}
[ -x "$bin" ] || { echo "no $bin: build first (ninja -C $build)"; exit 2; }
out=${TC_RANDOM_OUT:-$(mktemp -d /tmp/tc-random.XXXXXX)}
mkdir -p "$out"
export TC_ASYNC=0 TC_CACHE=0 TC_HOT=${TC_HOT:-1}
# One kernel thread per job when the jobs fill the cores (results do not
# depend on the thread count; TC_THREADS overrides).
if [ "$jobs" -ge "$(nproc)" ]; then
  export TC_THREADS=${TC_THREADS:-1}
fi
start=$(date +%s)

# One job: seeds [a, b); after a crash, go on after the crashing seed.
run_range() {
  local i=$1 a=$2 b=$3 try=0 log
  while [ "$a" -lt "$b" ]; do
    log=$out/job$i.$try.log
    "$bin" --seeds "$a" "$b" -k 0 -v >"$log" 2>&1
    if grep -q '^random programs:' "$log"; then
      return
    fi
    local s
    s=$(grep -o '^CRASH seed [0-9]*' "$log" | tail -1 | awk '{print $3}')
    if [ -z "$s" ]; then
      echo "DIED seeds $a..$b (see $log)" >>"$out/crashes"
      return
    fi
    echo "CRASH seed $s (see $log)" >>"$out/crashes"
    a=$((s + 1))
    try=$((try + 1))
  done
}

i=0
while read -r a b n; do
  run_range "$i" "$a" "$b" &
  i=$((i + 1))
done < <("$bin" --split "$count" "$seed" "$jobs")
wait
secs=$(( $(date +%s) - start ))

# Summary over the per-seed lines of every job (crashed runs included).
cat "$out"/job*.log | python3 -c '
import re, sys
tot = dict(programs=0, compiled=0, failed=0, kernels=0, structures=0)
fails = []
for line in sys.stdin:
    m = re.match(r"seed \d+: (\d+) programs, (\d+) compiled, (\d+) failed, "
                 r"(\d+) kernels", line)
    if m:
        for k, v in zip(tot, m.groups()):
            tot[k] += int(v)
        tot["structures"] += 1
    m = re.match(r"FAIL seed (\d+) instance (\d+): (.*)", line)
    if m:
        fails.append((int(m.group(1)), int(m.group(2)), m.group(3)))
print("%(programs)d programs run (%(structures)d seeds), %(compiled)d with "
      "compiled regions, %(failed)d failed; %(kernels)d kernels compiled" % tot)
for s, j, why in sorted(fails):
    print("FAIL seed %d instance %d: %s" % (s, j, why[:200]))
open(sys.argv[1], "w").write("".join("%d\n" % s for s, _, _ in sorted(fails)))
open(sys.argv[2], "w").write("%d\n" % tot["programs"])
' "$out/failing-seeds" "$out/programs"
if [ -s "$out/crashes" ]; then
  cat "$out/crashes"
fi
programs=$(cat "$out/programs")
echo "$secs s with $jobs jobs; $(awk -v p="$programs" -v s="$secs" \
  'BEGIN { if (p > 0) printf "%.0f s per 100,000 programs", s * 100000 / p }')"

# Shrink each failing seed alone, in a fresh process.
max=${TC_RANDOM_SHRINK:-10}
n=0
for s in $(sort -un "$out/failing-seeds"); do
  [ "$n" -lt "$max" ] || break
  "$bin" --seeds "$s" "$((s + 1))" -k 1 -c >"$out/seed$s.txt" 2>&1
  echo "seed $s: $(grep -m1 -E 'shrunk to|does not fail' "$out/seed$s.txt" |
                   sed 's/^ *//') -> $out/seed$s.txt"
  n=$((n + 1))
done
if [ -s "$out/crashes" ]; then
  for s in $(grep -o '^CRASH seed [0-9]*' "$out/crashes" | awk '{print $3}' |
             sort -un); do
    [ "$n" -lt "$max" ] || break
    "$bin" --crash "$s" -c >"$out/crash$s.txt" 2>&1
    echo "crash seed $s: $(head -1 "$out/crash$s.txt") -> $out/crash$s.txt"
    n=$((n + 1))
  done
fi
echo "logs in $out"
if [ -s "$out/failing-seeds" ] || [ -s "$out/crashes" ]; then
  exit 1
fi
