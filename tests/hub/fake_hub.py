"""A Hugging Face Hub for the tests: the hub's endpoints, headers and redirects over plain HTTP, serving
real model files (the bundled models/tiny-code-qwen2), with a second server standing in for the CDN that
large (LFS) files redirect to. Standard library only. Knobs let a test cut a transfer, corrupt bytes,
slow a file down, or gate a repo; every request is logged for the test to check."""
import hashlib
import http.server
import json
import os
import ssl
import threading
import time
import urllib.parse

LFS_SUFFIXES = (".safetensors", "tokenizer.json")
# Files real repos carry that a model does not need: they must never be requested.
DECOYS = {
    "pytorch_model.bin": b"not a model",
    "onnx/model.onnx": b"not a model",
    "model-q4.gguf": b"not a model",
    "README.md": b"# tiny\n",
    ".gitattributes": b"*.safetensors filter=lfs\n",
}


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, name, folder, gated=False):
        self.name = name
        self.gated = gated
        self.files = {}
        for entry in sorted(os.listdir(folder)):
            with open(os.path.join(folder, entry), "rb") as f:
                self.files[entry] = f.read()
        self.files.update(DECOYS)
        digest = hashlib.sha1(name.encode())
        for n in sorted(self.files):
            digest.update(n.encode() + hashlib.sha256(self.files[n]).digest())
        self.commit = digest.hexdigest()

    def is_lfs(self, filename):
        return filename.endswith(LFS_SUFFIXES)

    def etag(self, filename):
        data = self.files[filename]
        return hashlib.sha256(data).hexdigest() if self.is_lfs(filename) else git_blob_sha1(data)


class FakeHub:
    TOKEN = "hf_test_token"

    def __init__(self, model_folder, tls=None):
        self.tls = tls                 # (certfile, keyfile): both servers speak HTTPS
        self.repos = {}
        self.renamed = {}              # old name -> new name (relative redirects, as for a renamed repo)
        self.blobs = {}                # sha256 -> bytes, served by the CDN
        self.log = []                  # (server, method, path, headers dict)
        self.cut_once = {}             # filename -> bytes sent before the CDN drops the connection (once)
        self.corrupt = set()           # filenames whose bytes the CDN flips
        self.slow = {}                 # filename -> seconds to sleep per 64 KiB
        self.lock = threading.Lock()
        self.add_repo("sluice-test/tiny-code-qwen2", model_folder)
        self.add_repo("sluice-test/gated-qwen2", model_folder, gated=True)
        self.renamed["sluice-test/old-name"] = "sluice-test/tiny-code-qwen2"
        self.hub = self._serve(self._hub_handler())
        self.cdn = self._serve(self._cdn_handler())

    def add_repo(self, name, folder, gated=False):
        repo = Repo(name, folder, gated)
        self.repos[name] = repo
        for f in repo.files:
            if repo.is_lfs(f):
                self.blobs[repo.etag(f)] = (f, repo.files[f])

    @property
    def scheme(self):
        return "https" if self.tls else "http"

    @property
    def endpoint(self):
        return "%s://127.0.0.1:%d" % (self.scheme, self.hub.server_address[1])

    @property
    def cdn_origin(self):
        return "%s://localhost:%d" % (self.scheme, self.cdn.server_address[1])  # another host name than the hub's

    def requests(self, server=None, method=None, contains=""):
        with self.lock:
            return [r for r in self.log if (server is None or r[0] == server) and (method is None or r[1] == method)
                    and contains in r[2]]

    def close(self):
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    def _serve(self, handler):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def _record(self, server, handler):
        with self.lock:
            self.log.append((server, handler.command, handler.path, dict(handler.headers.items())))

    def _hub_handler(self):
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                hub._record("hub", self)
                self._route(head=False)

            def do_HEAD(self):
                hub._record("hub", self)
                self._route(head=True)

            def _send(self, status, headers=(), body=b"", head=False):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _error(self, status, code, message, head=False):
                body = json.dumps({"error": message}).encode()
                self._send(status, [("X-Error-Code", code), ("X-Error-Message", message),
                                    ("Content-Type", "application/json")], body, head)

            def _authorized(self, repo):
                return not repo.gated or self.headers.get("Authorization") == "Bearer " + FakeHub.TOKEN

            def _route(self, head):
                split = urllib.parse.urlsplit(self.path)
                path = urllib.parse.unquote(split.path)
                parts = path.strip("/").split("/")
                if parts == ["api", "models"]:
                    return self._search(urllib.parse.parse_qs(split.query), head)
                if len(parts) >= 6 and parts[0] == "api" and parts[1] == "models" and parts[4] == "revision":
                    return self._model_info("/".join(parts[2:4]), "/".join(parts[5:]), head)
                if len(parts) >= 5 and parts[2] == "resolve":
                    return self._resolve("/".join(parts[0:2]), parts[3], "/".join(parts[4:]), head)
                self._error(404, "NotFound", "no such route", head)

            def _search(self, query, head):
                """GET /api/models?search=&limit=: the repos whose name holds the text, most downloaded first."""
                text = query.get("search", [""])[0].lower()
                limit = int(query.get("limit", ["20"])[0])
                found = [r for n, r in sorted(hub.repos.items()) if text in n.lower()]
                models = [{"id": r.name, "modelId": r.name, "downloads": 1000 + len(r.name), "likes": 7,
                           "pipeline_tag": "text-generation", "library_name": "transformers",
                           "gated": "manual" if r.gated else False, "private": False, "tags": ["safetensors"]}
                          for r in found]
                models.sort(key=lambda m: -m["downloads"])
                self._send(200, [("Content-Type", "application/json")], json.dumps(models[:limit]).encode(), head)

            def _model_info(self, name, revision, head):
                if name in hub.renamed:
                    return self._send(307, [("Location", "/api/models/%s/revision/%s" % (hub.renamed[name], revision))], head=head)
                repo = hub.repos.get(name)
                if repo is None:
                    return self._error(401, "RepoNotFound", "Repository not found", head)
                if revision not in ("main", repo.commit):
                    return self._error(404, "RevisionNotFound", "Invalid rev id: " + revision, head)
                info = {"id": name, "sha": repo.commit, "gated": "manual" if repo.gated else False, "private": False,
                        "siblings": [{"rfilename": f} for f in sorted(repo.files)]}
                self._send(200, [("Content-Type", "application/json")], json.dumps(info).encode(), head)

            def _resolve(self, name, revision, filename, head):
                if name in hub.renamed:
                    target = "/%s/resolve/%s/%s" % (hub.renamed[name], revision, urllib.parse.quote(filename))
                    return self._send(307, [("Location", target)], head=head)
                repo = hub.repos.get(name)
                if repo is None:
                    return self._error(401, "RepoNotFound", "Repository not found", head)
                if revision not in ("main", repo.commit):
                    return self._error(404, "RevisionNotFound", "Invalid rev id: " + revision, head)
                if not self._authorized(repo):
                    return self._error(401, "GatedRepo", "Access to model %s is restricted. You must have access to it "
                                       "and be authenticated to access it. Please log in." % name, head)
                if filename not in repo.files:
                    return self._error(404, "EntryNotFound", "Entry not found", head)
                data = repo.files[filename]
                common = [("X-Repo-Commit", repo.commit), ("Accept-Ranges", "bytes")]
                if repo.is_lfs(filename):
                    sha = repo.etag(filename)
                    location = "%s/blobs/%s?sig=signed" % (hub.cdn_origin, sha)
                    return self._send(302, common + [("Location", location), ("X-Linked-Etag", '"%s"' % sha),
                                                     ("X-Linked-Size", str(len(data))),
                                                     ("ETag", '"%s"' % git_blob_sha1(b"pointer " + sha.encode()))], head=head)
                self._send(200, common + [("ETag", '"%s"' % repo.etag(filename))], data, head)

        return Handler

    def _cdn_handler(self):
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                hub._record("cdn", self)
                sha = urllib.parse.urlsplit(self.path).path.rsplit("/", 1)[-1]
                if sha not in hub.blobs:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                filename, data = hub.blobs[sha]
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[6:-1])
                if filename in hub.corrupt:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                body = data[start:]
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                with hub.lock:
                    cut = hub.cut_once.pop(filename, None)
                if cut is not None:
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                try:
                    for i in range(0, len(body), 65536):
                        self.wfile.write(body[i:i + 65536])
                        delay = hub.slow.get(filename, 0)
                        if delay:
                            self.wfile.flush()
                            time.sleep(delay)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client went away (a test killed it)

        return Handler
