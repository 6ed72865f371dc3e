#!/bin/bash
# Fetch Vulkan headers new enough for current llama.cpp (Debian 13's libvulkan-dev 1.4.x and
# spirv-headers) into DEST (default ~/.cache/llamaforge/vulkan-sdk) WITHOUT installing them:
# `apt-get download` + `dpkg -x`. Debian 12's own headers (1.3.239) lack vk::LayerSettingEXT.
# llamaforge finds DEST/usr/include automatically (or pass --vulkan-include / set VULKAN_SDK).
#   scripts/fetch-vulkan-headers.sh [DEST]
set -euo pipefail
dest=${1:-${LLAMAFORGE_CACHE:-$HOME/.cache/llamaforge}/vulkan-sdk}
if [ -f "$dest/usr/include/vulkan/vulkan_core.h" ] && [ -d "$dest/usr/include/spirv" ]; then
  echo "$dest (already there)"; exit 0
fi
mkdir -p "$dest"; dest=$(cd "$dest" && pwd)
state=$(mktemp -d); debs=$(mktemp -d); trap 'rm -rf "$state" "$debs"' EXIT
mkdir -p "$state/lists/partial"
src=/etc/apt/sources.list.d/debian.sources
uri=$( (awk '/^URIs:/{print $2; exit}' "$src" 2>/dev/null) || true)
uri=${uri:-http://deb.debian.org/debian}
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" > "$state/sources.list"
o=(-o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$state/lists")
apt-get "${o[@]}" -q update >/dev/null
(cd "$debs" && apt-get "${o[@]}" -q download libvulkan-dev spirv-headers >/dev/null 2>&1)
for d in "$debs"/*.deb; do dpkg -x "$d" "$dest"; done
test -f "$dest/usr/include/vulkan/vulkan_core.h"
grep -m1 'define VK_HEADER_VERSION ' "$dest/usr/include/vulkan/vulkan_core.h"
echo "$dest"
