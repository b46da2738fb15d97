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

from harness import RepoServerCase, run_testdeps
from test_infer import synthetic, write_model


def lazy(cfg):
    cfg["lifecycle"] = {"load": "lazy"}
    return cfg


class TritonClientTest(RepoServerCase):
    @classmethod
    def populate(cls, repo):
        write_model(repo, "tc_eager", synthetic("tc_eager", base_us=1000, per_row_us=0))
        write_model(repo, "tc_lazy", lazy(synthetic("tc_lazy", base_us=1000, per_row_us=0)))

    def test_repository_api_and_infer_through_tritonclient(self):
        # batching.max_batch_size 3 instead of the file's 8.
        override = synthetic("tc_eager", base_us=1000, per_row_us=0,
                             batching={"max_batch_size": 3})
        code, out = run_testdeps(
            ["tritonclient_calls.py", "--url", "127.0.0.1:%d" % self.srv.port,
             "--eager", "tc_eager", "--lazy", "tc_lazy", "--override", json.dumps(override),
             "--unknown", "tc_no_such_model"], timeout=120)
        self.assertEqual(code, 0, "tritonclient_calls.py exited %d; its output:\n%s\nserver log:\n%s"
                         % (code, out, self.srv.log()))
        self.assertNotIn("FAIL", out)
        self.assertEqual(out.count("ok: "), 8, out)


if __name__ == "__main__":
    unittest.main()
