#!/usr/bin/env python3
"""Starts the real `sluice serve` and runs tests/server/node/sdk_test.mjs (the official OpenAI Node.js SDK)
against it. Exit 77 (ctest SKIP_RETURN_CODE) with a message when node or the `openai` package is missing
(tests/server/node/install.sh installs it)."""
import argparse
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server_harness import Server  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--node-dir", required=True)
    a = ap.parse_args()
    if not shutil.which("node"):
        print("SKIP: node is not installed")
        return 77
    if not os.path.exists(os.path.join(a.node_dir, "node_modules", "openai", "package.json")):
        print("SKIP: the openai npm package is not installed; run tests/server/node/install.sh")
        return 77
    if not os.access(a.sluice, os.X_OK) or not os.path.exists(os.path.join(a.model, "config.json")):
        print("SKIP: sluice binary or model missing")
        return 77
    srv = Server(a.sluice, a.model)
    try:
        env = dict(os.environ, SLUICE_BASE_URL=srv.base_url + "/v1")
        p = subprocess.run(["node", "sdk_test.mjs"], cwd=a.node_dir, env=env, timeout=120)
        code = p.returncode
    finally:
        rc = srv.stop()
        if rc != 0:
            print("server exited with %d:\n%s" % (rc, "".join(srv.stderr_lines)))
            code = code or 1
    return code


if __name__ == "__main__":
    sys.exit(main())
