#!/usr/bin/env python3
"""A fake ``llama-server`` for unit tests of the bench runner's error paths.

Behaviour from FAKE_MODE: ok | oom (exit 1 at load with an allocation error) | unhealthy (503
forever) | hang (healthy, /completion never answers) | hang-once (hang on the first start, with FAKE_STATE) | crash-request (exits during /completion)
| portbusy-once (first start: bind error) | fit-refused (logs that fitting was refused because of
tensor overrides, as newer servers do with -ncmoe, unless started with -c). | amx-crash (logs AMX/CPU_REPACK buffers and dies of
SIGSEGV at load unless --no-repack is given, like gcc-12 builds on AMX CPUs) | crash-always
(the same, whatever the arguments) | no-samplers (HTTP 400 for a request that sets ``samplers``). A request
with ``samplers: ["top_k"]`` reports tg 110 instead of 100 (105 with ``["temperature", "top_k"]``); ``stream: true`` answers server-sent events. Timings are fake but well-formed.
"""

import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = os.environ.get("FAKE_MODE", "ok")
STATE = os.environ.get("FAKE_STATE", "")

if "--help" in sys.argv:
    print("-m, --model FNAME\n-np, --parallel N\n--no-mmproj\n--log-jsonl\n-ncmoe, --n-cpu-moe N\n"
          "-fitt, --fit-target MiB\n-t, --threads N\n-ngl, --n-gpu-layers N\n--host HOST\n--port PORT\n"
          "--repack, -nr, --no-repack\n-ub, --ubatch-size N")
    sys.exit(0)

port = int(sys.argv[sys.argv.index("--port") + 1])
print(json.dumps({"type": "log", "level": "info", "msg": "srv  llama_server: initializing ...\n"}), flush=True)

if MODE == "oom":
    print(json.dumps({"type": "log", "level": "error",
                      "msg": "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 24000 MiB on device 0: "
                             "cudaMalloc failed: out of memory\n"}), flush=True)
    print(json.dumps({"type": "log", "level": "error", "msg": "llama_init_from_model: failed to load model\n"}),
          flush=True)
    sys.exit(1)
if MODE == "fit-refused" and "-c" not in sys.argv:
    print(json.dumps({"type": "log", "level": "warn",
                      "msg": "common_fit_params: failed to fit params to free device memory: "
                             "model_params::tensor_buft_overrides already set by user, abort\n"}), flush=True)
if MODE in ("amx-crash", "crash-always"):
    print("load_tensors:          AMX model buffer size =    12.00 MiB\n"
          "load_tensors:   CPU_REPACK model buffer size =    40.00 MiB", flush=True)
    if MODE == "crash-always" or "--no-repack" not in sys.argv:
        os.kill(os.getpid(), signal.SIGSEGV)
if MODE == "portbusy-once" and STATE and not os.path.exists(STATE):
    open(STATE, "w").close()
    print(json.dumps({"type": "log", "level": "error",
                      "msg": f"srv    start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: {port}\n"}),
          flush=True)
    sys.exit(1)

started = time.monotonic()
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        loading = MODE == "unhealthy" or time.monotonic() - started < 0.3
        if self.path == "/health":
            return self._send(503 if loading else 200, {"status": "loading" if loading else "ok"})
        if self.path == "/props":
            n_ctx = int(sys.argv[sys.argv.index("-c") + 1]) if "-c" in sys.argv else 8192
            return self._send(200, {"default_generation_settings": {"n_ctx": n_ctx}, "build_info": "b1-fake"})
        if self.path == "/v1/models":
            return self._send(200, {"data": [{"meta": {"n_ctx_train": 32768, "n_ctx": 8192}}]})
        self._send(404, {})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(n) or b"{}")
        if self.path == "/tokenize":
            return self._send(200, {"tokens": list(range(len(body["content"].split())))})
        if self.path == "/apply-template":
            text = "".join(f"<|{m['role']}|>{m['content']}" for m in body["messages"]) + "<|assistant|>"
            return self._send(200, {"prompt": text})
        if self.path == "/completion":
            if MODE == "hang" or (MODE == "hang-once" and STATE and not os.path.exists(STATE)):
                if MODE == "hang-once":
                    open(STATE, "w").close()
                time.sleep(3600)
            if MODE == "crash-request":
                print(json.dumps({"type": "log", "level": "error", "msg": "GGML_ASSERT(x) failed\n"}), flush=True)
                os._exit(134)
            if MODE == "no-samplers" and "samplers" in body:
                return self._send(400, {"error": {"message": "unknown field samplers"}})
            pn = len(body["prompt"]) if isinstance(body["prompt"], list) else 10
            speed = {("top_k",): 110.0, ("temperature", "top_k"): 105.0}.get(tuple(body.get("samplers") or ()), 100.0)
            final = {"content": "x", "prompt": "echo", "stop": True, "timings": {
                "prompt_n": pn, "prompt_ms": pn / 2.0, "prompt_per_second": 2000.0 + pn % 7,
                "predicted_n": body["n_predict"], "predicted_ms": body["n_predict"] * 10.0,
                "predicted_per_second": speed},
                "generation_settings": {"samplers": body.get("samplers") or ["top_k", "top_p", "temperature"]}}
            if body.get("stream"):
                return self._stream(body["n_predict"], final)
            return self._send(200, final)
        self._send(404, {})

    def _stream(self, n, final):
        """Server-sent events: one event per token (a few ms apart), then the final one with the timings."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(n):
            self.wfile.write(b"data: " + json.dumps({"content": "x", "tokens": [i], "stop": False}).encode() + b"\n\n")
            self.wfile.flush()
            time.sleep(0.002)
        self.wfile.write(b"data: " + json.dumps({**final, "content": "", "tokens": []}).encode() + b"\n\n")
        self.wfile.flush()


srv = ThreadingHTTPServer(("127.0.0.1", port), H)
try:
    srv.serve_forever()
finally:
    print(json.dumps({"type": "fit_memory_breakdown", "data": {"unit": "MiB", "rows": [
        {"kind": "host", "name": "Host", "self": 81, "model": 74, "context": 2, "compute": 4}]}}), flush=True)
