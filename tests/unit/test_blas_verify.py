"""The BLAS verify rule on what llama.cpp really printed (issue 43): a BLAS build's ``llama-bench --list-devices``
lists its library as a device without an index; a plain CPU build lists none. A "blas" build whose binary lists no
BLAS device has no BLAS backend and is refused, as a CUDA build that sees only Vulkan devices is. (The real binaries:
tests/integration/test_blas_real.py.)"""

from __future__ import annotations

from llamaforge import backends
from llamaforge.backends.base import HostFacts
from llamaforge.builds.verify import diagnose
from llamaforge.llamacpp.devices import Device, device_label, parse_devices
from llamaforge.variants.observe import device_facts

PIN = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
VERSION = {"version": "0.5.0-dev", "build_number": 0, "commit": "0c1e57098"}
#: `llama-bench --list-devices` of the default pin's blas build (OpenBLAS 0.3.21, Debian 12), as printed
BLAS_LISTING = "Available devices:\n  BLAS: OpenBLAS (0 MiB, 0 MiB free)\n"
#: the same pin's cpu build
CPU_LISTING = "Available devices:\n  (none)\n"


def test_the_blas_device_is_listed_without_an_index():
    (d,) = parse_devices(BLAS_LISTING)
    assert d == Device("BLAS", 0, "OpenBLAS", 0, 0, indexed=False)
    assert d.label == "BLAS"
    assert parse_devices(CPU_LISTING) == []


def test_indexed_devices_keep_their_labels():
    (d,) = parse_devices("Available devices:\n  Vulkan1: llvmpipe (LLVM 15.0.6, 256 bits) (32768 MiB, 32768 MiB free)\n")
    assert (d.backend, d.index, d.indexed, d.label) == ("Vulkan", 1, True, "Vulkan1")
    assert d.name == "llvmpipe (LLVM 15.0.6, 256 bits)"
    # stored device dicts of builds verified before `indexed` existed are indexed
    assert device_label("CUDA", 0) == "CUDA0" and device_label("BLAS", 0, False) == "BLAS"
    assert device_facts(BLAS_LISTING)["devices"] == ["BLAS: OpenBLAS"]


def test_a_blas_binary_passes_as_a_blas_build():
    assert diagnose("blas", PIN, VERSION, parse_devices(BLAS_LISTING)) == ([], [])


def test_a_binary_without_the_blas_backend_is_refused():
    probs, fixes = diagnose("blas", PIN, VERSION, parse_devices(CPU_LISTING))
    assert probs == ["built for BLAS but the binary has no BLAS backend (`--list-devices` lists no BLAS device)"]
    assert "libopenblas-dev" in fixes[0] and "GGML_BLAS=ON, GGML_BLAS_VENDOR=OpenBLAS" in fixes[0]
    assert "this is not a blas build" in fixes[0]


def test_a_blas_build_that_lists_another_backend_is_refused_like_cuda_vs_vulkan():
    devs = parse_devices("Available devices:\n  Vulkan0: NVIDIA GeForce RTX 3090 (24576 MiB, 23000 MiB free)\n")
    probs, fixes = diagnose("blas", PIN, VERSION, devs)
    assert probs == ["built for BLAS but the binary sees only Vulkan0 (NVIDIA GeForce RTX 3090)"]
    assert fixes[0].startswith("this is not a blas build")


def test_a_gpu_build_without_its_device_still_says_it_sees_no_device():
    # the wording for a host-CPU backend (no backend in the binary) is not the GPU's (a missing device)
    assert diagnose("vulkan", PIN, VERSION, [])[0] == ["the Vulkan build sees no device"]
    assert diagnose("cuda", PIN, VERSION, parse_devices(BLAS_LISTING))[0] == [
        "built for CUDA but the binary sees only BLAS (OpenBLAS)"]


def test_the_blas_capabilities_name_its_library():
    blas = backends.get("blas")
    caps = blas.verify_capabilities([d.name for d in parse_devices(BLAS_LISTING)], False)
    assert caps == {"blas_library": "OpenBLAS"}
    assert blas.describe_capabilities(caps) == ["BLAS: OpenBLAS"]
    assert blas.verify_capabilities([], False) == {} and blas.describe_capabilities({}) == []


def test_blas_is_tested_and_runs_on_the_cpu_with_the_cpu_quirks():
    blas = backends.get("blas")
    assert blas.tested and blas.device_kind == "cpu" and not blas.offloads
    assert blas.device_prefix == "BLAS"
    assert [q.name for q in blas.quirks] == [q.name for q in backends.get("cpu").quirks]
    assert "no-repack" in [q.name for q in blas.quirks]
    assert "issue 43" not in blas.note


def test_doctor_names_the_openblas_it_would_use(monkeypatch, tmp_path):
    header = tmp_path / "openblas_config.h"
    header.write_text('#define OPENBLAS_VERSION " OpenBLAS 0.3.21 "\n')
    monkeypatch.setattr("llamaforge.backends.blas.openblas_header", lambda: str(header))
    monkeypatch.setattr("llamaforge.backends.blas.openblas_library", lambda: "/usr/lib/x86_64-linux-gnu/libopenblas.so")
    warn = ("AMX CPU × gcc 12", "build with --no-amx")
    check = backends.get("blas").doctor_checks(None, HostFacts(cpu_warnings=(warn,)))  # type: ignore[arg-type]
    assert check.can_run is True and check.devices == ["OpenBLAS 0.3.21 (host CPU)"] and check.reasons == [warn]
    monkeypatch.setattr("llamaforge.backends.blas.openblas_library", lambda: None)
    assert backends.get("blas").doctor_checks(None, HostFacts()).devices == []  # type: ignore[arg-type]
