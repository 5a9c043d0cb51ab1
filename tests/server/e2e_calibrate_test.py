#!/usr/bin/env python3
"""End-to-end tests of `sluice serve --calibrate` (issue 27) with the bundled model: it writes a plan
file keyed by model and machine under $XDG_CACHE_HOME/sluice/plans, a later start uses it for the
options not given (visible in --info), and a corrupt, oversized or mismatched plan file is ignored
with a warning. Exit 77 (ctest SKIP_RETURN_CODE) when the binary or model is missing."""
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server_harness import run_e2e_tests  # noqa: E402

ARGS = None


class Calibrate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.env = dict(os.environ, XDG_CACHE_HOME=cls.tmp.name)
        cls.calibration = cls.serve("--calibrate", timeout=600)
        files = glob.glob(os.path.join(cls.tmp.name, "sluice", "plans", "*.json"))
        cls.plan_file = files[0] if len(files) == 1 else None
        if cls.plan_file:
            with open(cls.plan_file) as f:
                cls.plan_text = f.read()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def serve(cls, *args, timeout=120):
        return subprocess.run([ARGS.sluice, "serve", "--model", ARGS.model, "--threads", "2", *args], capture_output=True, text=True,
                              timeout=timeout, env=cls.env)

    def setUp(self):
        self.assertEqual(self.calibration.returncode, 0, self.calibration.stderr)
        self.assertIsNotNone(self.plan_file, "--calibrate wrote no plan file (or several)")
        with open(self.plan_file, "w") as f:  # every test starts from the plan calibration wrote
            f.write(self.plan_text)

    def test_calibrate_writes_a_plan_with_measurements_and_choices(self):
        self.assertIn("plan written: " + self.plan_file, self.calibration.stdout)
        plan = json.loads(self.plan_text)
        self.assertEqual(plan["version"], 1)
        self.assertEqual(plan["model"], os.path.basename(os.path.normpath(ARGS.model)))
        measured = plan["measured"]
        for key in ["host_read_gbps", "weight_read_gbps", "disk_read_gbps"]:
            self.assertGreater(measured[key], 0, key)
        self.assertEqual([row["batch"] for row in measured["decode"]], [1, 2, 4, 8])
        self.assertTrue(all(row["tokens_per_second"] > 0 for row in measured["decode"] + measured["prefill"]))
        self.assertIn(plan["choices"]["parallel"], [1, 2, 4, 8])
        self.assertIn(plan["choices"]["prefill_size"], [128, 256, 512])
        self.assertIn(plan["model_key"], os.path.basename(self.plan_file))
        self.assertIn(plan["machine_key"], os.path.basename(self.plan_file))

    def test_a_later_start_uses_the_plan_for_what_was_not_given(self):
        plan = json.loads(self.plan_text)
        out = self.serve("--info")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("calibrated plan %s: parallel %d, prefill-size %d" % (self.plan_file, plan["choices"]["parallel"],
                                                                           plan["choices"]["prefill_size"]), out.stdout)
        out = self.serve("--info", "--parallel", "3")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("calibrated plan " + self.plan_file, out.stdout)
        self.assertNotIn("parallel %d" % plan["choices"]["parallel"], out.stdout)

    def test_measured_layer_count_resolves_gpu_layers_auto(self):
        # This machine has no GPU: --gpu-layers auto alone is refused; a plan that measured the
        # offload (here written by hand: calibrating on PoCL takes minutes) resolves it.
        plan = json.loads(self.plan_text)
        self.assertEqual(plan["choices"]["gpu_layers"], -1)  # calibrated without --gpu-layers auto
        plan["choices"]["gpu_layers"] = 0
        with open(self.plan_file, "w") as f:
            f.write(json.dumps(plan))
        out = self.serve("--info", "--gpu-layers", "auto")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("gpu-layers 0", out.stdout)

    def test_another_backend_is_another_machine_key(self):
        out = self.serve("--info", "--backend", "cpu")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn("calibrated plan", out.stdout)

    def check_ignored(self, content, why):
        with open(self.plan_file, "w") as f:
            f.write(content)
        out = self.serve("--info")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn("calibrated plan", out.stdout)
        self.assertIn("ignored", out.stderr)
        self.assertIn(why, out.stderr)

    def test_corrupt_plan_is_ignored_with_a_warning(self):
        self.check_ignored(self.plan_text[: len(self.plan_text) // 2], "plan file")
        self.check_ignored("\x00\xff garbage", "plan file")

    def test_oversized_plan_is_ignored(self):
        self.check_ignored(" " * (70 << 10) + self.plan_text, "larger than 64 KiB")

    def test_out_of_range_choice_is_ignored(self):
        plan = json.loads(self.plan_text)
        plan["choices"]["parallel"] = -4
        self.check_ignored(json.dumps(plan), "parallel")

    def test_plan_for_another_machine_is_ignored(self):
        plan = json.loads(self.plan_text)
        plan["machine_key"] = "0123456789abcdef"
        self.check_ignored(json.dumps(plan), "another machine")


def main():
    def use(args):
        global ARGS
        ARGS = args
    return run_e2e_tests(use)


if __name__ == "__main__":
    sys.exit(main())
