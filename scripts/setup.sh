#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for llamaforge: system packages (compilers, CMake, ninja,
# ccache, Vulkan loader + Mesa lavapipe + glslc, OpenBLAS (the blas backend), Chromium for the HTML test, OpenSSH for the fleet test), the Python package
# with its dependencies (and the docs site's mkdocs), and Vulkan headers new enough for llama.cpp (Debian 13's, unpacked into
# ~/.cache/llamaforge/vulkan-sdk — nothing is installed system-wide for that).
# Idempotent; re-runs are quick.   Usage: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
pkgs=(build-essential cmake ninja-build ccache git pkg-config glslc spirv-headers libvulkan-dev libvulkan1
      mesa-vulkan-drivers vulkan-tools libopenblas-dev chromium openssh-server openssh-client)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
python3 -m pip install -q --disable-pip-version-check -e '.[dev,docs]'
scripts/fetch-vulkan-headers.sh >/dev/null
echo "setup done: $(python3 -c 'import llamaforge; print("llamaforge", llamaforge.__version__)')"
