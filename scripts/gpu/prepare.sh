#!/usr/bin/env bash
# Prepare .carry/ (git-ignored, ~53 MB) on a networked machine for scripts/gpu/session.sh on an
# offline GPU machine: Python wheels the GPU box lacks, Debian 13 Vulkan toolchain + GL dispatch
# debs, Debian 12's gcc 12.2 (for the AMX phase), and a trimmed tarball of the default pin's llama.cpp tree (commit in its pax header).
#   scripts/gpu/prepare.sh [PYTHON_VERSION (default 3.12)]
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
py=${1:-3.12}
mkdir -p .carry/wheels .carry/debs/toolchain .carry/debs/gl
python3 -m pip download -q --only-binary :all: --python-version "$py" --platform manylinux2014_x86_64 --no-deps \
  -d .carry/wheels invoke GitPython gitdb smmap "gguf==0.19.0" pyyaml tqdm scikit-build-core pathspec packaging
state=$(mktemp -d); trap 'rm -rf "$state"' EXIT; mkdir -p "$state/lists/partial"
uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || echo http://deb.debian.org/debian)
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" > "$state/sources.list"
o=(-o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$state/lists")
apt-get "${o[@]}" -q update >/dev/null
(cd .carry/debs/toolchain && apt-get "${o[@]}" -q download glslc libshaderc1 libvulkan-dev libvulkan1 spirv-headers >/dev/null 2>&1)
(cd .carry/debs/gl && apt-get "${o[@]}" -q download libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null 2>&1)
mkdir -p .carry/debs/git && (cd .carry/debs/git && apt-get -q download git >/dev/null 2>&1)   # Debian 12's git, for a box without it
# Debian 12's gcc 12.2 (the toolchain whose AMX path crashed, issue #11) as a relocatable tree (~25 MB):
# session.sh amx builds with it when present. lto1/lto-dump and static libstdc++ are left out.
gcc=$(mktemp -d) && (cd "$gcc" && apt-get -q download gcc-12 g++-12 cpp-12 libgcc-12-dev libstdc++-12-dev >/dev/null 2>&1 \
  && mkdir x && for d in *.deb; do dpkg -x "$d" x; done && cd x && rm -rf usr/share usr/lib/gcc/x86_64-linux-gnu/12/plugin \
  usr/lib/gcc/x86_64-linux-gnu/12/{lto1,libstdc++.a,libsupc++.a} usr/bin/x86_64-linux-gnu-lto-dump-12 \
  && tar cJf "$repo/.carry/gcc-12.2-debian12.tar.xz" .) ; rm -rf "$gcc"
python3 -m llamaforge source-tarball --out .carry/
du -sh .carry
