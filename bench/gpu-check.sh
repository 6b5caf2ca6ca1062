#!/usr/bin/env bash
# gpu-check.sh [BUILD] -- one prepared command for a machine with an NVIDIA
# GPU, its driver and the CUDA toolkit (no package registry needed: bring a
# build folder made on a like machine, or build here if meson, ninja and
# tc's Debian dependencies are present). It must finish in under 8 minutes.
#
# What it does today (issue 13, parts 1-2: the renderer and NVRTC; device
# tensors and a launcher are not built yet, so there is nothing to time on
# the device):
#   1. the machine: GPU, driver, compute capability, nvcc, NVRTC
#   2. tc's probe: tc_cuda_available() must be true here, and tc_to(t,
#      "cuda") must fail only for want of device tensors
#   3. NVRTC + ptxas on every kernel the fusion tests and a sample of random
#      programs generate, for sm_90, with the kernels' CUDA C also run on the
#      host against eager (tests/jit_cuda)
#   4. the whole test suite, and tc-bench's CPU workloads for reference
# Output: a log folder (GPU_CHECK_OUT, default /tmp/tc-gpu-check.XXXXXX)
# with one file per step and summary.txt.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${GPU_CHECK_OUT:-$(mktemp -d /tmp/tc-gpu-check.XXXXXX)}
mkdir -p "$out"
start=$(date +%s)
summary=$out/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
left() { echo $((480 - ($(date +%s) - start))); }   # seconds of the 8 minutes

note "tc gpu-check, $(date -u +%FT%TZ), logs in $out"
# 1. The machine
{
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total \
    --format=csv,noheader 2>&1 || echo "nvidia-smi: not found"
  nvcc --version 2>&1 | tail -1 || echo "nvcc: not found"
} > "$out/machine.txt"
note "machine: $(head -1 "$out/machine.txt")"

# 2. Build if needed, then tc's own probe
if [ ! -x "$build/tests/test_cuda" ]; then
  (meson setup "$build" --werror >/dev/null && ninja -C "$build") \
    > "$out/build.txt" 2>&1 || { note "build failed: see build.txt"; exit 1; }
fi
cat > "$out/probe.c" <<'PROBE'
#include <stdio.h>
#include <tc.h>
int main(void)
{
  printf("tc_cuda_available: %d\n", tc_cuda_available());
  tc_tensor *t = tc_zeros(TC_F32, TC_SHAPE(2));
  tc_tensor *d = tc_to(t, "cuda");
  printf("tc_to cuda: %s\n", d ? "ok" : tc_last_error());
  return tc_cuda_available() ? 0 : 1;
}
PROBE
if cc -I"$root/include" "$out/probe.c" -o "$out/probe" -L"$build" -ltc \
     -Wl,-rpath,"$build" >> "$out/probe.txt" 2>&1 &&
   "$out/probe" >> "$out/probe.txt" 2>&1; then
  note "probe: $(tr '\n' ';' < "$out/probe.txt")"
else
  note "probe FAILED (a GPU machine must report a device): $(tr '\n' ';' < "$out/probe.txt")"
fi

# 3. NVRTC + ptxas on the suite's kernels, and host execution against eager
export TC_ASYNC=0 TC_CACHE=0
(cd "$build" && TC_TEST_CUDA=host:4,nvrtc timeout "$(left)" \
   ./tests/test_fusion_cuda) > "$out/fusion-cuda.txt" 2>&1
note "fusion kernels: $(grep '^hostexec: .* failures' "$out/fusion-cuda.txt" || echo 'did not finish')"
(cd "$build" && TC_HOT=1 TC_TEST_CUDA=host:4,nvrtc:2 TC_RANDOM_PROGRAMS=100 \
   TC_RANDOM_SEED=5000000 timeout "$(left)" ./tests/test_random_cuda) \
   > "$out/random-cuda.txt" 2>&1
note "random programs: $(grep '^random programs' "$out/random-cuda.txt" | cut -c1-120 || echo 'did not finish')"
note "random kernels: $(grep '^hostexec: .* failures' "$out/random-cuda.txt" || echo 'did not finish')"

# 4. The suite (module and API tests), then the CPU workloads for reference
(cd "$build" && timeout "$(left)" meson test --no-rebuild --print-errorlogs \
   --suite module --suite api --suite api-cuda) > "$out/suite.txt" 2>&1
note "suite: $(grep -E '^(Ok|Fail|Skipped|Timeout):' "$out/suite.txt" | tr '\n' ' ')"
if [ "$(left)" -gt 60 ] && [ -x "$build/bench/tc-bench" ]; then
  timeout "$(left)" "$build/bench/tc-bench" > "$out/bench.txt" 2>&1
  note "tc-bench (CPU): see bench.txt"
fi
note "device benchmarks (W1, W2, W3, W7 on the GPU, launch overhead, torch):"
note "  not yet: tc has no device tensors or launcher (issue 13 part 3)"
note "done in $(( $(date +%s) - start )) s"
