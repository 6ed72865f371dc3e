#!/usr/bin/env bash
# Prepare .carry/ (git-ignored, ~53 MB) on a networked machine for scripts/gpu/session.sh on an
# offline GPU machine: Python wheels the GPU box lacks, Debian 13 Vulkan toolchain + GL dispatch
# debs, Debian 12's gcc 12.2 (for the AMX phase), and trimmed tarballs of llama.cpp trees (commit in each pax header):
# the default pin's and the release pins lcpp-0.3.35 and lcpp-0.3.36 (session.sh history). What is already in
# .carry/ is kept, not fetched again (delete a part to refresh it).
#   scripts/gpu/prepare.sh [PYTHON_VERSION (default 3.12)]
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
py=${1:-3.12}
mkdir -p .carry/wheels .carry/debs/toolchain .carry/debs/gl
have() { compgen -G "$1" >/dev/null; }   # a glob that matches something
have '.carry/wheels/*.whl' || python3 -m pip download -q --only-binary :all: --python-version "$py" --platform manylinux2014_x86_64 --no-deps \
  -d .carry/wheels invoke GitPython gitdb smmap "gguf==0.19.0" pyyaml tqdm scikit-build-core pathspec packaging
state=$(mktemp -d); trap 'rm -rf "$state"' EXIT; mkdir -p "$state/lists/partial"
uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || echo http://deb.debian.org/debian)
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" > "$state/sources.list"
o=(-o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$state/lists")
apt-get "${o[@]}" -q update >/dev/null
have '.carry/debs/toolchain/*.deb' || (cd .carry/debs/toolchain && apt-get "${o[@]}" -q download glslc libshaderc1 libvulkan-dev libvulkan1 spirv-headers >/dev/null 2>&1)
have '.carry/debs/gl/*.deb' || (cd .carry/debs/gl && apt-get "${o[@]}" -q download libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null 2>&1)
mkdir -p .carry/debs/git && { have '.carry/debs/git/*.deb' || (cd .carry/debs/git && apt-get -q download git >/dev/null 2>&1); }   # Debian 12's git, for a box without it
# Debian 12's gcc 12.2 (the toolchain whose AMX path crashed, issue #11) as a relocatable tree (~25 MB):
# session.sh amx builds with it when present. lto1/lto-dump and static libstdc++ are left out.
[ -f .carry/gcc-12.2-debian12.tar.xz ] || { gcc=$(mktemp -d) && (cd "$gcc" && apt-get -q download gcc-12 g++-12 cpp-12 libgcc-12-dev libstdc++-12-dev >/dev/null 2>&1 \
  && mkdir x && for d in *.deb; do dpkg -x "$d" x; done && cd x && rm -rf usr/share usr/lib/gcc/x86_64-linux-gnu/12/plugin \
  usr/lib/gcc/x86_64-linux-gnu/12/{lto1,libstdc++.a,libsupc++.a} usr/bin/x86_64-linux-gnu-lto-dump-12 \
  && tar cJf "$repo/.carry/gcc-12.2-debian12.tar.xz" .) ; rm -rf "$gcc"; }
# llama.cpp trees: the default pin's, and the release pins the GPU history measures (session.sh history)
for pin in default lcpp-0.3.35 lcpp-0.3.36; do
  c=$(python3 -c 'import sys, tomllib; t = tomllib.load(open("pins.toml", "rb")); print(t["pins"][sys.argv[1]]["commit"][:9])' "$pin")
  [ -f ".carry/llama.cpp-$c.tar.gz" ] || python3 -m llamaforge source-tarball --pin "$pin" --out .carry/
done
du -sh .carry
