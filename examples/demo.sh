#!/usr/bin/env bash
# The README's demo: install dependencies, build, run the MLP example eagerly
# and with TC_COMPILE=1 (twice: a cold start that compiles, then a warm
# start that loads every kernel from the disk store), train a small MLP
# with autograd and AdamW in both modes, train a character-level GPT for a
# few steps eagerly and then compiled (losses bitwise equal), decode with
# the Llama example (eager, then compiled), then list the store.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
iters=${1:-20}
export TC_CACHE_DIR=${TC_CACHE_DIR:-$(mktemp -d /tmp/tc-demo-cache-XXXXXX)}
echo "== eager =="
TC_STATS=1 ./build/examples/mlp "$iters"
echo
echo "== TC_COMPILE=1, cold (compiles the hot regions) =="
TC_COMPILE=1 TC_STATS=1 TC_LOG=fusion,compile ./build/examples/mlp "$iters"
echo
echo "== TC_COMPILE=1, warm (loads the kernels from $TC_CACHE_DIR) =="
TC_COMPILE=1 TC_STATS=1 ./build/examples/mlp "$iters"
echo
echo "== training with autograd: eager, then TC_COMPILE=1 (same final loss bits) =="
./build/examples/train_mlp 300 | tail -3
TC_COMPILE=1 ./build/examples/train_mlp 300 | tail -3
echo
echo "== GPT training on the GPL text (examples/train_gpt.c): eager, then compiled =="
echo "   (TC_ASYNC=0: the step compiles at its second run, then runs compiled)"
TC_ASYNC=0 ./build/examples/train_gpt -n 12 -k 2 -g 120
echo
echo "== Llama inference, stories15M shapes with random weights (examples/llama.c) =="
ckpt=$(mktemp /tmp/tc-demo-stories15M-XXXXXX.safetensors)
./build/examples/llama init stories15M "$ckpt"
TC_STATS=1 ./build/examples/llama run "$ckpt" -n 64 -t 0.8
rm -f "$ckpt"
echo
echo "== the kernel store: tc-dump list =="
./build/tc-dump list
./build/tc-dump stats
