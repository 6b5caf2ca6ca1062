#!/usr/bin/env bash
# Install tc's build and test dependencies from Debian's packages (idempotent:
# does nothing when they are all present). Needs root or sudo.
set -euo pipefail
pkgs=(build-essential pkg-config meson ninja-build libcmocka-dev
      libopenblas-dev libgccjit-12-dev libxxhash-dev python3 procps)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
