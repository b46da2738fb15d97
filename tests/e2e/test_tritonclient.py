"""test_tritonclient.py - Triton's own Python client, unmodified, against
batchgate (SPEC.md "Models: load, unload, memory": tritonclient's
get_model_repository_index, load_model and unload_model work): health,
the repository index with a READY and a not-yet-loaded lazy model, unload,
load, load with a config override read back through get_model_config, an
infer that loads the lazy model, and an unknown model's load raising
InferenceServerException.

The calls are in tritonclient_calls.py, run with the interpreter of the
virtual environment scripts/fetch-testdeps makes (tritonclient and numpy);
this file stays standard-library Python like the other e2e tests. Without
that environment the test fails, saying to run the script."""

import json
import unittest

from harness import RepoServerCase, roundtrip, run_testdeps
from test_infer import synthetic, write_model


def lazy(cfg):
    cfg["lifecycle"] = {"load": "lazy"}
    return cfg


class TritonClientTest(RepoServerCase):
    # Answers compressed when tritonclient asks (response_compression_algorithm).
    config = {"compression": {"responses": True}}

    @classmethod
    def populate(cls, repo):
        write_model(repo, "tc_eager", synthetic("tc_eager", base_us=1000, per_row_us=0))
        write_model(repo, "tc_lazy", lazy(synthetic("tc_lazy", base_us=1000, per_row_us=0)))
        wide = synthetic("tc_wide", base_us=1000, per_row_us=0)
        wide["outputs"][0]["shape"] = [200]
        write_model(repo, "tc_wide", wide)

    def test_repository_api_and_infer_through_tritonclient(self):
        # batching.max_batch_size 3 instead of the file's 8.
        override = synthetic("tc_eager", base_us=1000, per_row_us=0,
                             batching={"max_batch_size": 3})
        code, out = run_testdeps(
            ["tritonclient_calls.py", "--url", "127.0.0.1:%d" % self.srv.port,
             "--eager", "tc_eager", "--lazy", "tc_lazy", "--wide", "tc_wide",
             "--override", json.dumps(override),
             "--unknown", "tc_no_such_model"], timeout=120)
        self.assertEqual(code, 0, "tritonclient_calls.py exited %d; its output:\n%s\nserver log:\n%s"
                         % (code, out, self.srv.log()))
        self.assertNotIn("FAIL", out)
        self.assertEqual(out.count("ok: "), 11, out)


class LoggingErrorsTest(RepoServerCase):
    @classmethod
    def populate(cls, repo):
        pass   # no model: the logging routes are the server's

    def test_every_bad_setting_is_400(self):
        for body, msg in (("[1]", "must be a JSON object"), ("{\"log_info\": tru}", "invalid JSON at column"),
                          ("{\"log_colour\": 1}", "not a log setting"),
                          ("{\"log_info\": 1}", "log_info: must be true or false"),
                          ("{\"log_error\": false}", "errors are always logged"),
                          ("{\"log_verbose_level\": -1}", "must be an integer >= 0"),
                          ("{\"log_format\": \"ISO8601\"}", "only \"default\""),
                          ("{\"log_file\": \"/tmp/x.log\"}", "cannot change at run time"),
                          ("{\"log_info\": true, \"log_warning\": false}", "a ladder"),
                          ("{\"log_info\": false, \"log_verbose_level\": 1}", "a ladder")):
            r = roundtrip(self.srv.port, "POST", "/v2/logging",
                          [("Content-Type", "application/json")], body)
            self.assertEqual(r.status, 400, (body, r))
            self.assertIn(msg, r.json()["error"], body)
        r = roundtrip(self.srv.port, "GET", "/v2/logging")
        self.assertEqual(r.json()["log_verbose_level"], 0, "nothing changed")

    def test_a_setting_lowers_the_levels_above_it(self):
        # {"log_info": false} at debug answered 200 and changed nothing
        # (debug logs info), and {"log_warning": false} at info likewise.
        def post(body):
            r = roundtrip(self.srv.port, "POST", "/v2/logging",
                          [("Content-Type", "application/json")], json.dumps(body))
            self.assertEqual(r.status, 200, (body, r))
            return r.json()
        self.addCleanup(post, {"log_info": True, "log_warning": True, "log_verbose_level": 0})
        self.assertEqual(post({"log_verbose_level": 1})["log_info"], True)
        got = post({"log_info": False})
        self.assertEqual((got["log_info"], got["log_verbose_level"], got["log_warning"]),
                         (False, 0, True), got)
        post({"log_info": True})
        got = post({"log_warning": False})
        self.assertEqual((got["log_info"], got["log_warning"]), (False, False), got)
        # And one turned on turns on those below it: {"log_verbose_level": 1}
        # at error was refused (the re-test of the first version).
        got = post({"log_verbose_level": 1})
        self.assertEqual((got["log_verbose_level"], got["log_info"], got["log_warning"]),
                         (1, True, True), got)
        post({"log_warning": False})
        got = post({"log_info": True})
        self.assertEqual((got["log_verbose_level"], got["log_info"], got["log_warning"]),
                         (0, True, True), got)
        # Said in the log, leaving error too (it was said before the change).
        # Waited for: the log is read from the server's stderr as it comes.
        self.assertIsNotNone(self.srv.wait_log(r"log level error -> info \(POST /v2/logging\)"))
        r = roundtrip(self.srv.port, "POST", "/v2/logging", [("Content-Type", "application/json")],
                      json.dumps({"log_warning": False, "log_verbose_level": 1}))
        self.assertEqual(r.status, 400, r)
        self.assertIn("log_verbose_level > 0 with log_warning: false", r.json()["error"])


if __name__ == "__main__":
    unittest.main()
