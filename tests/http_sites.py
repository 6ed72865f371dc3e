"""Real HTTP servers on 127.0.0.1 for the download tests (not collected: no ``test_`` prefix).

Each :class:`Site` is a ``ThreadingHTTPServer`` on its own port, so two sites are two hosts to
``requests`` (it strips ``Authorization`` when a redirect changes host or port). A site serves
``…/model.gguf`` with ``ETag``, ``Range`` and ``If-Range`` as RFC 9110 says, and can misbehave on
purpose: answer a range from the wrong offset, ignore ranges, send no ``Content-Length``, cut the
body, or (the hub) redirect ``…/resolve/…`` to another site with ``X-Linked-ETag``/``X-Linked-Size``
on the redirect only. Every request is logged with its headers.
"""

from __future__ import annotations

import hashlib
import http.server
import threading

PAYLOAD = bytes(range(256)) * 4096 * 3   # 3 MiB
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class Site:
    def __init__(self) -> None:
        self.payload = PAYLOAD
        self.etag: str | None = '"v1"'
        self.range_mode = "ok"              # ok | ignore (200) | wrong_offset (206 from elsewhere)
        self.send_length = True
        self.cut_after: int | None = None   # close after this many body bytes (once)
        self.file_headers: dict[str, str] = {}
        self.redirect_to: Site | None = None  # /resolve/ paths redirect there
        self.redirect_headers: dict[str, str] = {}
        self.location: str | None = None    # when set, every request is redirected (302) there, as written
        self.log: list[dict] = []
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str = "/org/repo/model.gguf") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def gets(self) -> list[dict]:
        return [r for r in self.log if r["method"] == "GET"]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(site: Site) -> type[http.server.BaseHTTPRequestHandler]:
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802
            self._serve(body=False)

        def do_GET(self) -> None:  # noqa: N802
            self._serve(body=True)

        def _serve(self, body: bool) -> None:
            site.log.append({"method": self.command, "path": self.path, "headers": dict(self.headers)})
            if site.location is not None:
                self.send_response(302)
                self.send_header("Location", site.location)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if "/resolve/" in self.path and site.redirect_to is not None:
                self.send_response(302)
                self.send_header("Location", site.redirect_to.url("/cdn/blob/model.gguf?X-Amz-Signature=cdnsecret"))
                for k, v in site.redirect_headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if not self.path.split("?")[0].endswith("/model.gguf"):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data, start, status = site.payload, 0, 200
            rng, if_range = self.headers.get("Range"), self.headers.get("If-Range")
            if rng and site.range_mode != "ignore" and (if_range is None or if_range == site.etag):
                want = int(rng.split("=")[1].split("-")[0])
                if want >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = want if site.range_mode == "ok" else max(0, want - 4096)
                status = 206
            self.send_response(status)
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            out = data[start:]
            if site.etag:
                self.send_header("ETag", site.etag)
            for k, v in site.file_headers.items():
                self.send_header(k, v)
            if site.send_length:
                self.send_header("Content-Length", str(len(out)))
            else:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if not body:
                return
            if site.cut_after is not None:
                out = out[: site.cut_after]
                site.cut_after = None
                self.close_connection = True
            self.wfile.write(out)

    return H
