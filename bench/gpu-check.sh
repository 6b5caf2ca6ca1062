#!/usr/bin/env bash
# gpu-check.sh [BUILD] -- one prepared command for a machine with an NVIDIA
# GPU, its driver and the CUDA toolkit (no package registry needed: bring a
# build folder made on a like machine, or build here if meson, ninja and
# tc's Debian dependencies are present). It must finish in under 8 minutes.
#
# What it does:
#   1. the machine: GPU, driver, compute capability, nvcc, NVRTC
#   2. tc's probe: tc_cuda_available() must be true, tc_to(t, "cuda") work
#   3. device tensors and eager CUDA ops on the real device (the test that
#      CI runs through the fake driver: values bitwise equal to the CPU's);
#      3b. the same in compile mode (regions through NVRTC); 3c. random
#      programs compiled on the device, bitwise against the CPU's eager
#   4. tc-gpu-bench: W1, W2, W3, W7 (and W1p, W2p: the same from primitive
#      ops; W14b: a cumsum along rows, the parallel scan; W15: topk 50 of
#      64x32000, chunked ranks; W16: scatter_add of an embedding's
#      gradient), eager and compiled, on the device against tc's own device
#      copy, launch overhead per eager op, NVRTC compile time per kernel;
#      then the same in PyTorch eager and torch.compile (bench/gpu-peers.py)
#   4b. a stories15M-shaped Llama (random weights) decoding 64 tokens on
#      the device, eager and compiled (examples/llama.c -d cuda): tokens/s
#      and whether both modes chose the same tokens
#   4c. the character-level GPT of examples/train_gpt.c trained for 30
#      AdamW steps on the device, eager and compiled: ms/step and whether
#      both modes' losses are bitwise equal
#   5. NVRTC + ptxas on every kernel the fusion tests and a sample of random
#      programs generate, for sm_90, with the kernels' CUDA C also run on the
#      host against eager (tests/jit_cuda)
#   6. the whole test suite, time allowing
# Output: a log folder (GPU_CHECK_OUT, default /tmp/tc-gpu-check.XXXXXX)
# with one file per step and summary.txt.
#
# On a machine without tc's libraries: make gpu-pack/tc-gpu.tar.xz here
# (bench/gpu-pack.sh), carry gpu-pack along, and run this script with no
# BUILD: it unpacks the build as build-gpu, points the programs at the
# packed libraries the machine lacks (only those: its own zlib or zstd
# stay first for gcc and python), puts libgccjit 12's link files in
# place when the machine's gcc is another version, and links the path the
# pack was made at to this checkout (the build names its sources by it).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
meson_cmd=(meson)
out=${GPU_CHECK_OUT:-$(mktemp -d /tmp/tc-gpu-check.XXXXXX)}
mkdir -p "$out"
start=$(date +%s)
summary=$out/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
left() {   # seconds of the 8 minutes less 15 for the last notes, at least 1
           # (timeout 0 never ends)
  local l=$((465 - ($(date +%s) - start)))
  echo $((l > 0 ? l : 1))
}
cap() {    # a step's own limit, or what is left of the 8 minutes if less
  local l; l=$(left)
  echo $(($1 < l ? $1 : l))
}

note "tc gpu-check, $(date -u +%FT%TZ), logs in $out"
pack=$root/gpu-pack/tc-gpu.tar.xz
if [ -z "${1:-}" ] && [ -f "$pack" ]; then
  un=$root/gpu-pack/unpacked
  rm -rf "$un" && mkdir -p "$un" && tar -C "$un" -xJf "$pack"
  made_at=$(cat "$un/root")
  if [ "$made_at" != "$root" ] && [ ! -e "$made_at" ]; then
    mkdir -p "$(dirname "$made_at")" && ln -s "$root" "$made_at"
  elif [ "$made_at" != "$root" ]; then
    note "pack: $made_at exists and is not this checkout: the build's paths to its sources (the CUDA shim, meson test) may name other files"
  fi
  rm -rf "$root/build-gpu" && mv "$un/build-gpu" "$root/build-gpu"
  build=$root/build-gpu   # by the pack's path where that leads here
  [ "$(readlink -f "$made_at")" = "$root" ] && build=$made_at/build-gpu
  for f in "$un"/lib/*; do   # keep only what the machine lacks
    ldconfig -p | grep -q "^[[:space:]]*$(basename "$f") " && rm -f "$f"
  done
  export LD_LIBRARY_PATH=$un/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  gcc12=/usr/lib/gcc/x86_64-linux-gnu/12
  [ -x "$gcc12/collect2" ] || { mkdir -p "$gcc12" && cp "$un"/gcc12/* "$gcc12/"; }
  meson_cmd=(python3 "$un/meson/meson")   # the version the build knows
  note "pack: $pack unpacked (made at $made_at; libraries used from it: $(ls "$un/lib" | tr '\n' ' '))"
fi
# The toolkit by its nvcc, for NVRTC, cuBLAS and ptxas where no ld.so.conf
# entry names its libraries (tc looks in $CUDA_HOME/lib64 after the
# loader's path)
if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then
  export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
fi
# 1. The machine
{
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total \
      --format=csv,noheader 2>&1
  else
    echo "nvidia-smi: not found"
  fi
  nvcc --version 2>&1 | tail -1 || echo "nvcc: not found"
  echo "CUDA_HOME=${CUDA_HOME:-}"
  ldd --version 2>&1 | head -1
} > "$out/machine.txt"
note "machine: $(head -1 "$out/machine.txt")"
glibc=$(ldd --version 2>&1 | head -1 | grep -oE '[0-9]+\.[0-9]+$')
if [ -n "$glibc" ] && [ "$(printf '%s\n2.36\n' "$glibc" | sort -V | head -1)" != 2.36 ]; then
  note "glibc $glibc < 2.36: the pack's libgccjit (Debian 12's) will not load, so CPU regions run eagerly (said once per process) and the CPU JIT's tests fail; the CUDA path does not need it"
fi

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

# 3. Device tensors and eager CUDA ops on this device
export TC_ASYNC=0 TC_CACHE=0
(cd "$build" && TC_TEST_CUDA_DEVICE=real timeout "$(cap 120)" \
   ./tests/test_cuda_device) > "$out/cuda-device.txt" 2>&1
note "device tests: $(grep -E 'PASSED|FAILED' "$out/cuda-device.txt" | tr '\n' ' ')"
# 3b. The same traced: regions on device tensors compiled through NVRTC
(cd "$build" && TC_TEST_CUDA_DEVICE=real TC_COMPILE=1 TC_HOT=1 timeout "$(cap 120)" \
   ./tests/test_cuda_device) > "$out/cuda-device-traced.txt" 2>&1
note "device tests traced: $(grep -E 'PASSED|FAILED' "$out/cuda-device-traced.txt" | tr '\n' ' ')"
# 3c. Random programs compiled on the device against the CPU's eager runs,
#     bit for bit (those with a matmul skipped: cuBLAS sums in its order)
(cd "$build" && TC_TEST_CUDA_DEVICE=real TC_RANDOM_DEVICE=cuda \
   TC_RANDOM_INDEXING=1 TC_RANDOM_INSTANCES=2 TC_RANDOM_SHRINK_SECONDS=20 \
   TC_RANDOM_SEED=6000000 TC_RANDOM_PROGRAMS=120 timeout "$(cap 90)" \
   ./tests/test_random) > "$out/random-device.txt" 2>&1
note "random programs on the device: $(grep -E '^random programs|PASSED|FAILED' "$out/random-device.txt" | cut -c1-160 | tr '\n' ' ')"

# 4. The device benchmark, tc then torch
timeout "$(cap 150)" "$build/bench/tc-gpu-bench" > "$out/gpu-bench.txt" 2>&1
note "$(cat "$out/gpu-bench.txt")"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  timeout "$(cap 150)" python3 "$root/bench/gpu-peers.py" > "$out/gpu-peers.txt" 2>&1
  note "$(cat "$out/gpu-peers.txt")"
else
  note "torch with CUDA not importable: no peer figures"
fi

# 4b. A Llama decoding on the device, eager and compiled
if [ -x "$build/examples/llama" ] &&
   "$build/examples/llama" init stories15M "$out/stories15M.safetensors" \
     > "$out/llama.txt" 2>&1; then
  timeout "$(cap 90)" "$build/examples/llama" run "$out/stories15M.safetensors" \
    -n 64 -d cuda >> "$out/llama.txt" 2>&1
  note "llama on the device: $(grep -E 'tokens/s|identical|DIFFER|llama:' "$out/llama.txt" | tr '\n' ';')"
  rm -f "$out/stories15M.safetensors"
fi

# 4c. A GPT trained on the device (embedding gradients by scatter_add)
if [ -x "$build/examples/train_gpt" ]; then
  timeout "$(cap 60)" "$build/examples/train_gpt" -n 30 -k 10 -g 40 -D cuda \
    > "$out/train-gpt.txt" 2>&1
  note "gpt training on the device (rc $?): $(grep -E 'ms/step|bitwise|DIFFER|speedup|train_gpt:' "$out/train-gpt.txt" | tr '\n' ';')"
fi

# 5. NVRTC + ptxas on the suite's kernels, and host execution against eager
(cd "$build" && TC_TEST_CUDA=host:4,nvrtc timeout "$(left)" \
   ./tests/test_fusion_cuda) > "$out/fusion-cuda.txt" 2>&1
note "fusion kernels: $(grep '^hostexec: .* failures' "$out/fusion-cuda.txt" || echo 'did not finish')"
(cd "$build" && TC_HOT=1 TC_TEST_CUDA=host:4,nvrtc TC_RANDOM_PROGRAMS=100 \
   TC_RANDOM_SEED=5000000 timeout "$(left)" ./tests/test_random_cuda) \
   > "$out/random-cuda.txt" 2>&1
note "random programs: $(grep '^random programs' "$out/random-cuda.txt" | cut -c1-120 || echo 'did not finish')"
note "random kernels: $(grep '^hostexec: .* failures' "$out/random-cuda.txt" || echo 'did not finish')"

# 6. The suite (module and API tests), then the CPU workloads for reference
(cd "$build" && timeout "$(left)" "${meson_cmd[@]}" test --no-rebuild --print-errorlogs \
   --suite module --suite api --suite api-cuda) > "$out/suite.txt" 2>&1
note "suite: $(grep -E '^(Ok|Fail|Skipped|Timeout):' "$out/suite.txt" | tr '\n' ' ')"
if [ "$(left)" -gt 60 ] && [ -x "$build/bench/tc-bench" ]; then
  timeout "$(left)" "$build/bench/tc-bench" > "$out/bench.txt" 2>&1
  note "tc-bench (CPU): see bench.txt"
fi
note "done in $(( $(date +%s) - start )) s"
