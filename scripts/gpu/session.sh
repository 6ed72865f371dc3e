#!/usr/bin/env bash
# Run llamaforge phases on a lent, offline GPU machine from a carried working tree.
#   scripts/gpu/session.sh PHASE [ARGS...]
# Phases (each fits one ≤10-minute call; state stays in the tree's ignored folders while the
# machine is warm, and the store is copied to $OUT after every phase so a later session resumes):
#   setup                 install carried wheels (.carry/wheels) and the Vulkan toolchain debs
#   build BACKENDS        llamaforge build, one backend after the other (CUDA sm_90, Vulkan with Debian 13 glslc)
#   model                 synthesize the full-size qwen3.6-35b-a3b iq4_nl model (~19 GiB)
#   fitmap BUDGET_GIB     fitted context per ncmoe point (seconds)
#   bench SECONDS ARGS... llamaforge bench … stopped cleanly (SIGINT) after SECONDS; resume with --resume RUN
#   lf SECONDS ARGS...    any llamaforge command (e.g. reproduce RUN --points …), stopped after SECONDS
#   variants [SECONDS] [ARGS...]  issue #25: CUDA vs Vulkan × -fa on/off, plus Vulkan with GGML_VK_DISABLE_COOPMAT2=1,
#                         24 GiB budget, ncmoe 0,8, --launches auto (max 5); stopped cleanly after SECONDS (default
#                         540) and resumed by calling the phase again; report in $OUT/variants (→ results/h200/variants)
#   history SECONDS [BACKENDS] [HMIN]  issue #26: the release pins lcpp-0.3.35 and lcpp-0.3.36 (carried tarballs) ×
#                         BACKENDS (default cuda,vulkan) as a performance history (history.run --releases) in its own
#                         store (.gpu/history), 24 GiB budget, ncmoe 0, 3-5 starts per commit and backend. Each call
#                         first builds what is missing (release by release, each backend; a build starts only when its
#                         usual time fits SECONDS), then, once every build is there and HMIN (default 330) seconds are
#                         left, runs history.run --continue stopped cleanly (SIGINT) within SECONDS; call it again until
#                         it says done; with one backend per call (history 400 vulkan 120) the other backend's
#                         series join the same store. $OUT gets the store, logs, build logs and show.txt (history.show).
#                         Seen 12-02: builds took 314-344 s (CUDA) and 135-184 s (Vulkan); measuring 2 commits x 1
#                         backend took 70-175 s. The model needs a built tree's vocab, so it is made after the builds.
#   amx [BACKENDS]        issue #11 on an AMX host: the demo built with Debian 12's gcc 12.2 when .carry has it
#                         (else the host's gcc-12; Ubuntu's 12.4 ran without a quirk on 12-01), the toolchain
#                         × CPU pair whose CPU repack/AMX path crashed; results in $OUT/amx-demo.
# The code is frozen at `setup` (src/ copied to .gpu/src): later calls run that copy even if the
# checkout moved on in between, so build keys and the store schema stay those of the session.
# What to carry (git-ignored, made on the dev machine by scripts/gpu/prepare.sh): .carry/
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export LLAMAFORGE_CACHE=$ROOT/.gpu/cache LLAMAFORGE_WORKSPACE=$ROOT/.gpu/ws
export LLAMAFORGE_RESULTS=$ROOT/.gpu/ws/results
[ "${1:-}" = history ] && export LLAMAFORGE_RESULTS=$ROOT/.gpu/history   # its own store, not seeded (issue 26)
CODE=$ROOT/src; [ -d "$ROOT/.gpu/src" ] && CODE=$ROOT/.gpu/src
export PYTHONPATH=$ROOT/.gpu/pylib:$CODE
export LD_LIBRARY_PATH=/opt/vk/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -x /opt/git/usr/bin/git ] && ! command -v git >/dev/null; then
  export PATH=/opt/git/usr/bin:$PATH GIT_EXEC_PATH=/opt/git/usr/lib/git-core
fi
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] && export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
mkdir -p "$LLAMAFORGE_CACHE" "$LLAMAFORGE_WORKSPACE" "$LLAMAFORGE_RESULTS"
lf() { python3 -m llamaforge "$@"; }
save() {   # consistent copy of the store (WAL) + logs into $OUT
  [ -n "${OUT:-}" ] || return 0
  python3 - "$LLAMAFORGE_RESULTS/llamaforge.sqlite" "$OUT/llamaforge.sqlite" <<'PY'
import sqlite3, sys, os
if os.path.exists(sys.argv[1]):
    src = sqlite3.connect(sys.argv[1]); dst = sqlite3.connect(sys.argv[2]); src.backup(dst); dst.close()
PY
  [ -d "$LLAMAFORGE_RESULTS/logs" ] && tar czf "$OUT/logs.tgz" -C "$LLAMAFORGE_RESULTS" logs || true
}
trap save EXIT
pincommit() { python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["pins"][sys.argv[2]]["commit"][:9])' "$ROOT/pins.toml" "$1"; }
tarball="$ROOT/.carry/llama.cpp-$(pincommit default).tar.gz"
[ -f "$tarball" ] || tarball=$(ls "$ROOT"/.carry/llama.cpp-*.tar.gz | head -1)
commit=$(python3 -c "import tarfile,sys; print(tarfile.open(sys.argv[1]).pax_headers['comment'])" "$tarball")
cat > "$LLAMAFORGE_WORKSPACE/pins.toml" <<EOT
default = "default"
[pins.default]
commit = "$commit"
description = "llama.cpp $commit (carried tarball; upstream of llama-cpp-python 0.3.36)"
sources = ["tarball:$tarball"]
EOT
# the release pins whose trees were carried (prepare.sh): the carried tarball first, then their PyPI sdist, which
# makes them release pins for history.run --releases (pins other than the default, with a pypi: source)
HIST_PINS=()
for pin in lcpp-0.3.35 lcpp-0.3.36; do
  tb="$ROOT/.carry/llama.cpp-$(pincommit "$pin").tar.gz"
  [ -f "$tb" ] || continue
  HIST_PINS+=("$pin")
  c=$(python3 -c "import tarfile,sys; print(tarfile.open(sys.argv[1]).pax_headers['comment'])" "$tb")
  cat >> "$LLAMAFORGE_WORKSPACE/pins.toml" <<EOT

[pins."$pin"]
commit = "$c"
description = "llama.cpp vendored by llama-cpp-python ${pin#lcpp-} (carried tarball)"
sources = ["tarball:$tb", "pypi:llama-cpp-python==${pin#lcpp-}"]
EOT
done
# a store carried back from an earlier session (results/h200) seeds this one (not the history's own store)
if [ "${1:-}" != history ] && [ ! -f "$LLAMAFORGE_RESULTS/llamaforge.sqlite" ] && [ -f "$ROOT/results/h200/llamaforge.sqlite" ]; then
  cp "$ROOT/results/h200/llamaforge.sqlite" "$LLAMAFORGE_RESULTS/"
fi
cd "$LLAMAFORGE_WORKSPACE"
phase=${1:?phase}; shift
t0=$(date +%s)
case "$phase" in
  setup)
    rm -rf "$ROOT/.gpu/src" && cp -r "$ROOT/src" "$ROOT/.gpu/src" && export PYTHONPATH=$ROOT/.gpu/pylib:$ROOT/.gpu/src
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$ROOT/.gpu/pylib" "$ROOT"/.carry/wheels/*.whl 2>&1 \
      | grep -v WARNING || true
    if ! command -v git >/dev/null; then   # the sources layer needs git: Debian 12's runs on newer glibc
      mkdir -p /opt/git && for d in "$ROOT"/.carry/debs/git/*.deb; do dpkg -x "$d" /opt/git; done
    fi
    mkdir -p /opt/vk
    for d in "$ROOT"/.carry/debs/toolchain/*.deb; do dpkg -x "$d" /opt/vk; done
    for d in "$ROOT"/.carry/debs/gl/*.deb "$ROOT"/.carry/debs/toolchain/libvulkan1_*.deb; do dpkg -x "$d" /; done
    ldconfig
    lf doctor ;;
  build)   # one backend after the other, each with every core (8+8 concurrently was slower: 11-30)
    IFS=, read -ra bks <<< "${1:-cuda,vulkan}"; rc=0
    for b in "${bks[@]}"; do
      tb=$(date +%s)
      lf build --backends "$b" --cuda-archs 90 --jobs "$(nproc)" \
         --glslc /opt/vk/usr/bin/glslc --vulkan-include /opt/vk/usr/include > "$ROOT/.gpu/build-$b.log" 2>&1 || rc=1
      echo "== build $b ($(( $(date +%s) - tb )) s)"; tail -n 12 "$ROOT/.gpu/build-$b.log"
    done
    [ $rc = 0 ] ;;
  model)
    lf model.info "synth:qwen3.6-35b-a3b:iq4_nl" ;;
  fitmap)
    lf fitmap --model "synth:qwen3.6-35b-a3b:iq4_nl" --backends "${2:-cuda,vulkan}" --ncmoe 0:40 --vram-budget "${1:-24}" ;;
  bench)
    secs=${1:?seconds}; shift
    timeout -s INT -k 60 "$secs" python3 -m llamaforge bench --model "synth:qwen3.6-35b-a3b:iq4_nl" "$@" || echo "bench stopped (rc=$?)" ;;
  lf)
    secs=${1:?seconds}; shift
    timeout -s INT -k 60 "$secs" python3 -m llamaforge "$@" || echo "llamaforge $1 stopped (rc=$?)" ;;
  history)   # issue 26; resumable: builds marked done in .gpu/history/built-*, history.run --continue
    secs=${1:?seconds}; IFS=, read -ra bks <<< "${2:-cuda,vulkan}"; hmin=${3:-330}
    left() { echo $(( secs - ($(date +%s) - t0) )); }
    # the keys history.run computes (BuildOptions(): native CUDA archs, glslc and headers from the environment)
    export LLAMAFORGE_GLSLC=/opt/vk/usr/bin/glslc LLAMAFORGE_VULKAN_INCLUDE=/opt/vk/usr/include COLUMNS=${COLUMNS:-150}
    [ ${#HIST_PINS[@]} -ge 2 ] || { echo "history needs the carried tarballs of lcpp-0.3.35 and lcpp-0.3.36 (prepare.sh)"; exit 2; }
    pending=0
    for p in "${HIST_PINS[@]}"; do for b in "${bks[@]}"; do
      m="$LLAMAFORGE_RESULTS/built-$p-$b"
      [ -f "$m.ok" ] && continue
      if [ -f "$m.failed" ]; then continue; fi
      case $b in cuda) need=330 ;; vulkan) need=150 ;; *) need=240 ;; esac   # 294 s / 118 s on 16 cores (GPU.md)
      if [ "$(left)" -lt "$need" ]; then echo "== build $p $b: $(left) s left, needs ~$need s: next call"; pending=1; continue; fi
      tb=$(date +%s)
      if lf build --pins "$p" --backends "$b" > "$ROOT/.gpu/build-$p-$b.log" 2>&1; then touch "$m.ok"; else touch "$m.failed"; fi
      echo "== build $p $b ($(( $(date +%s) - tb )) s): $( [ -f "$m.ok" ] && echo ok || echo FAILED)"; tail -n 6 "$ROOT/.gpu/build-$p-$b.log"
      cp "$ROOT/.gpu/build-$p-$b.log" "${OUT:-/tmp}/" 2>/dev/null || true
    done; done
    [ $pending = 0 ] || { echo "history: builds pending; call the phase again"; exit 0; }
    run_bks=()   # a backend whose build failed for a release is left out (one line says so)
    for b in "${bks[@]}"; do
      if compgen -G "$LLAMAFORGE_RESULTS/built-*-$b.failed" >/dev/null; then echo "history: $b left out (a build failed)"
      else run_bks+=("$b"); fi
    done
    [ ${#run_bks[@]} -gt 0 ] || { echo "history: no backend built for both releases"; exit 1; }
    bl=$(IFS=,; echo "${run_bks[*]}"); done_mark="$LLAMAFORGE_RESULTS/history-$bl.done"
    if [ -f "$done_mark" ]; then echo "history ($bl): done before"
    elif [ "$(left)" -lt "$hmin" ]; then echo "history: $(left) s left, under $hmin s: call the phase again"
    else
      # the synthetic model needs a vocab GGUF from a built tree (the trimmed tarballs carry none): after the builds
      lf model.info "synth:qwen3.6-35b-a3b:iq4_nl" > "$ROOT/.gpu/model.log" 2>&1 || { tail -n 5 "$ROOT/.gpu/model.log"; exit 1; }
      echo "== history.run --releases --backend $bl, stopped after $(( $(left) - 65 )) s"
      if timeout -s INT -k 60 "$(( $(left) - 65 ))" python3 -m llamaforge history.run --releases --backend "$bl" \
           --model "synth:qwen3.6-35b-a3b:iq4_nl" --ncmoe 0 --vram-budget 24 --min-launches 3 --max-launches 5 \
           --prompt-tokens 2500 --n-predict 64 --continue; then touch "$done_mark"
      else echo "history.run stopped (rc=$?): call the phase again (--continue measures what is missing)"; fi
    fi
    lf history.show > "${OUT:-$ROOT/.gpu}/show.txt" 2>&1 || true
    cat "${OUT:-$ROOT/.gpu}/show.txt" ;;
  amx)
    grep -o 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
    gcc122=$ROOT/.carry/gcc-12.2-debian12.tar.xz   # Debian 12's gcc 12.2, the toolchain of the crash (prepare.sh)
    if [ -f "$gcc122" ]; then
      mkdir -p /opt/gcc122 && tar xJf "$gcc122" -C /opt/gcc122
      for l in /opt/gcc122/usr/lib/gcc/x86_64-linux-gnu/12/*.so; do   # the .so links point into Debian's libdir
        t=$(basename "$(readlink "$l" || true)"); [ -L "$l" ] && [ -e "/usr/lib/x86_64-linux-gnu/$t" ] \
          && ln -sf "/usr/lib/x86_64-linux-gnu/$t" "$l"
      done
      export CC=/opt/gcc122/usr/bin/gcc-12 CXX=/opt/gcc122/usr/bin/g++-12
    else
      export CC=gcc-12 CXX=g++-12
    fi
    export PATH=/opt/vk/usr/bin:$PATH LLAMAFORGE_GLSLC=/opt/vk/usr/bin/glslc LLAMAFORGE_VULKAN_INCLUDE=/opt/vk/usr/include
    "$CXX" --version | head -n 1
    lf doctor 2>&1 | grep -iE "amx|gcc|cc " || true
    lf demo --backends "${1:-cpu,vulkan}" --out "${OUT:-$ROOT/.gpu}/amx-demo"
    # the issue's plain bench (default prompt and options), on the same builds
    timeout -s INT -k 30 "${2:-150}" python3 -m llamaforge bench --model synth:tiny-qwen35moe \
      --backends "${1:-cpu,vulkan}" --ncmoe 0:2 --name amx-plain-bench || echo "plain bench stopped (rc=$?)"
    lf report --run amx-plain-bench --out "${OUT:-$ROOT/.gpu}/amx-bench" ;;
  variants)   # issue #25; the run is named h200-variants: a second call resumes it (same seed, missing starts only)
    secs=${1:-540}; shift || true
    if lf runs h200-variants >/dev/null 2>&1; then
      timeout -s INT -k 60 "$secs" python3 -m llamaforge bench --resume h200-variants || echo "variants stopped (rc=$?)"
    else
      timeout -s INT -k 60 "$secs" python3 -m llamaforge bench --model "synth:qwen3.6-35b-a3b:iq4_nl" \
        --variant 'cuda-fa-on=cuda:-fa on' --variant 'cuda-fa-off=cuda:-fa off' \
        --variant 'vk-fa-on=vulkan:-fa on' --variant 'vk-fa-off=vulkan:-fa off' \
        --variant 'vk-fa-on-nocm2=vulkan:GGML_VK_DISABLE_COOPMAT2=1 -fa on' \
        --vram-budget 24 --ncmoe 0,8 --launches auto --max-launches 5 --repeats 2 --n-predict 64 \
        --name h200-variants "$@" || echo "variants stopped (rc=$?)"
    fi
    lf report h200-variants --out "${OUT:-$ROOT/.gpu}/variants" || true ;;
  report)
    lf report "${1:-latest}" --out "$OUT/report" ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac
echo "phase $phase took $(( $(date +%s) - t0 )) s"
