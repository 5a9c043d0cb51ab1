#!/usr/bin/env python3
"""The deployment files a user adapts (deploy/): the Kubernetes manifests parse, their probes and ports
agree with each other and with what `sluice serve` listens on, and the container's arguments are
options `sluice serve` accepts (run with --info on the bundled model, the hub id swapped for it); the
systemd unit passes `systemd-analyze verify` (its program path pointed at the build) and the options
file it reads is `sluice serve --config`'s format. Exits 77 when PyYAML is missing."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOY = os.path.join(HERE, "..", "..", "deploy")
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from sluice_server_harness import run_e2e_tests  # noqa: E402

ARGS = None


class Kubernetes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import yaml
        with open(os.path.join(DEPLOY, "kubernetes", "sluice.yaml")) as f:
            cls.docs = {d["kind"]: d for d in yaml.safe_load_all(f)}

    def test_every_part_is_there(self):
        self.assertEqual(set(self.docs), {"Deployment", "Service", "Ingress", "ServiceMonitor"})

    def test_probes_ports_and_grace_agree(self):
        pod = self.docs["Deployment"]["spec"]["template"]["spec"]
        c = pod["containers"][0]
        port = {p["name"]: p["containerPort"] for p in c["ports"]}["http"]
        args = c["args"]
        self.assertEqual(int(args[args.index("--port") + 1]), port)
        self.assertEqual(args[args.index("--host") + 1], "0.0.0.0")
        self.assertEqual(c["readinessProbe"]["httpGet"], {"path": "/health", "port": "http"})
        grace = int(args[args.index("--shutdown-grace") + 1])
        self.assertGreater(pod["terminationGracePeriodSeconds"], grace)  # the drain finishes before a SIGKILL
        self.assertEqual(self.docs["Service"]["spec"]["ports"][0]["targetPort"], "http")
        self.assertEqual(self.docs["ServiceMonitor"]["spec"]["endpoints"][0]["path"], "/metrics")
        annotations = self.docs["Ingress"]["metadata"]["annotations"]
        self.assertEqual(annotations["nginx.ingress.kubernetes.io/upstream-hash-by"], "$http_x_session_id")

    def test_the_container_arguments_are_options_sluice_serve_accepts(self):
        args = list(self.docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"])
        self.assertEqual(args[0], "serve")
        args[args.index("--model") + 1] = ARGS.model  # the bundled model for the hub id (nothing downloads)
        args[args.index("--backend") + 1] = "cpu"    # no GPU here
        p = subprocess.run([ARGS.sluice, *args, "--info"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("weights", p.stdout)


class Systemd(unittest.TestCase):
    def test_the_unit_verifies_and_reads_a_config_file(self):
        if shutil.which("systemd-analyze") is None:
            self.skipTest("systemd-analyze not installed")
        text = open(os.path.join(DEPLOY, "systemd", "sluice@.service")).read()
        self.assertIn("--config /etc/sluice/%i.conf", text)
        with tempfile.TemporaryDirectory() as d:
            unit = os.path.join(d, "sluice@.service")
            with open(unit, "w") as f:
                f.write(text.replace("/usr/local/bin/sluice", os.path.abspath(ARGS.sluice)))
            p = subprocess.run(["systemd-analyze", "verify", "--man=no", unit], capture_output=True, text=True, timeout=60,
                               env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"})
            problems = [line for line in (p.stdout + p.stderr).splitlines()
                        if line.strip() and not re.search(r"Failed to (connect|open)|No such file or directory.*(bus|journal)", line)]
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(problems, [])
            # The options file an instance reads: `name = value` lines, as the unit's comment says.
            conf = os.path.join(d, "gpu0.conf")
            with open(conf, "w") as f:
                f.write("model = %s\nport = 5999\nbackend = cpu\nparallel = 2\n" % ARGS.model)
            p = subprocess.run([ARGS.sluice, "serve", "--config", conf, "--info"], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)


def main():
    try:
        import yaml  # noqa: F401
    except ImportError:
        print("SKIP: PyYAML missing (python3-yaml)")
        return 77

    def use(args):
        global ARGS
        ARGS = args
    return run_e2e_tests(use)


if __name__ == "__main__":
    sys.exit(main())
