#!/usr/bin/env python3
"""Runs the web app's browser test (tests/webapp/browser/browser_test.mjs): starts the test hub
(tests/hub/fake_hub.py, its model files slowed so a download's progress can be watched) and the real
`sluice serve --api-key --cors '*'` pointed at it with an empty cache, and a second server whose prompt
opens <think> (its page also reaches the first server across origins), then drives the app in headless
Chromium.

Exit 77 (ctest SKIP_RETURN_CODE) only when Chromium is not installed (the `chromium` package; CHROMIUM
names another binary). A missing node or puppeteer-core is a failure: tools/setup.sh installs both.
--update-screenshots writes the screenshots to tests/webapp/screenshots/ (committed); otherwise they go
to a temporary folder."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
sys.path.insert(0, os.path.join(HERE, "..", "hub"))
from fake_hub import FakeHub  # noqa: E402
from sluice_server_harness import Server  # noqa: E402

BROWSER_DIR = os.path.join(HERE, "browser")
KEY = "browser-test-key"


def find_chromium():
    for candidate in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def thinking_model(model, folder):
    """The bundled model with a generation prompt that opens <think> (as DeepSeek-R1's does): the server
    then streams its answer as reasoning_content, which the app shows apart."""
    os.makedirs(folder)
    for name in os.listdir(model):
        if name != "chat_template.jinja":
            os.symlink(os.path.join(os.path.abspath(model), name), os.path.join(folder, name))
    with open(os.path.join(model, "chat_template.jinja")) as f:
        template = f.read()
    opened = template.replace("'<|im_start|>assistant\\n'", "'<|im_start|>assistant\\n<think>\\n'")
    assert opened != template, "the bundled template's generation prompt changed; update thinking_model()"
    with open(os.path.join(folder, "chat_template.jinja"), "w") as f:
        f.write(opened)
    return folder


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--update-screenshots", action="store_true", help="write them to tests/webapp/screenshots/")
    a = ap.parse_args()
    chromium = find_chromium()
    if not chromium:
        print("SKIP: Chromium is not installed (Debian package `chromium`; tools/setup.sh installs it)")
        return 77
    if not shutil.which("node"):
        print("FAIL: node is not installed (tools/setup.sh installs it)")
        return 1
    if not os.path.exists(os.path.join(BROWSER_DIR, "node_modules", "puppeteer-core", "package.json")):
        print("FAIL: puppeteer-core is not installed: run tests/webapp/browser/install.sh (tools/setup.sh does)")
        return 1
    if not os.access(a.sluice, os.X_OK) or not os.path.exists(os.path.join(a.model, "config.json")):
        print("SKIP: sluice binary or model missing")
        return 77

    tmp = tempfile.mkdtemp(prefix="sluice-browser-")
    shots = os.path.join(HERE, "screenshots") if a.update_screenshots else os.path.join(tmp, "screenshots")
    os.makedirs(shots, exist_ok=True)
    hub = FakeHub(a.model)
    # ~19 MB in 64 KiB pieces: about 2 s of transfer, so the page sees the bar move.
    for name in hub.repos["sluice-test/tiny-code-qwen2"].files:
        if name.endswith(".safetensors"):
            hub.slow[name] = 0.006
    env_saved = dict(os.environ)
    for k in list(os.environ):
        if k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_")):
            del os.environ[k]
    os.environ.update(HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=os.path.join(tmp, "hub"), HF_HOME=os.path.join(tmp, "home"))
    srv = thinker = None
    code = 1
    try:
        srv = Server(a.sluice, a.model, "--api-key", KEY, "--cors", "*")
        # Greedy (--temp 0): sampled at the default temperature, the tiny model sometimes closes </think>
        # within its 40 tokens and the test's "nothing of it is the answer" no longer holds.
        thinker = Server(a.sluice, thinking_model(a.model, os.path.join(tmp, "tiny-thinking")),
                         "--max-tokens", "40", "--temp", "0")
        env = dict(os.environ, SLUICE_URL=srv.base_url, SLUICE_API_KEY=KEY, CHROMIUM=chromium, SCREENSHOT_DIR=shots,
                   SLUICE_THINKING_URL=thinker.base_url,
                   HOME=tmp)  # Chromium's profile and crash folders go to the temporary folder
        code = subprocess.run(["node", "browser_test.mjs"], cwd=BROWSER_DIR, env=env, timeout=150).returncode
        if code != 0:
            print("screenshots (and failure.png) in " + shots)
    finally:
        for server in (srv, thinker):
            if server:
                rc = server.stop()
                if rc != 0:
                    print("server exited with %d:\n%s" % (rc, "".join(server.stderr_lines)))
                    code = code or 1
        hub.close()
        os.environ.clear()
        os.environ.update(env_saved)
        if code == 0 or a.update_screenshots:
            shutil.rmtree(tmp, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
