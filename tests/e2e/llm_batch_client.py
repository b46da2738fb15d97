"""llm_batch_client.py - OpenAI's Batch API through batchgate with the official
`openai` Python client, as a user would call it. Run by test_llm_batch.py in
the test venv (scripts/fetch-testdeps):

    llm_batch_client.py create URL INPUT.jsonl    -> {"file": ..., "batch": {...}}
    llm_batch_client.py wait URL BATCH_ID TIMEOUT -> {"batch": {...}, "output": [...], "errors": [...]}

`create` uploads the file (purpose "batch", expiring after a day) and creates
the batch (its output files expiring two days after they are written); `wait`
polls client.batches.retrieve until the batch is final, then reads its
output and error files with client.files.content. Prints one JSON object."""

import json
import sys
import time

import openai

cmd, url = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=url.rstrip("/") + "/v1", api_key="none", max_retries=2,
                       timeout=60)

if cmd == "create":
    with open(sys.argv[3], "rb") as f:
        up = client.files.create(file=f, purpose="batch",
                                 expires_after={"anchor": "created_at", "seconds": 86400})
    got = client.files.retrieve(up.id)
    b = client.batches.create(input_file_id=up.id, endpoint="/v1/chat/completions",
                              completion_window="24h", metadata={"test": "sigkill"},
                              output_expires_after={"anchor": "created_at", "seconds": 172800})
    print(json.dumps({"file": up.model_dump(), "file_retrieved": got.id == up.id,
                      "batch": b.model_dump()}))
elif cmd == "wait":
    bid, timeout = sys.argv[3], float(sys.argv[4])
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        b = client.batches.retrieve(bid)
        polls += 1
        if b.status in ("completed", "failed", "expired", "cancelled") or \
                time.monotonic() > deadline:
            break
        time.sleep(0.2)
    out = {"batch": b.model_dump(), "polls": polls, "output": [], "errors": []}
    if b.output_file_id:
        out["output_file"] = client.files.retrieve(b.output_file_id).model_dump()
        text = client.files.content(b.output_file_id).text
        out["output"] = [json.loads(line) for line in text.splitlines() if line.strip()]
    if b.error_file_id:
        text = client.files.content(b.error_file_id).text
        out["errors"] = [json.loads(line) for line in text.splitlines() if line.strip()]
    out["listed"] = [x.id for x in client.batches.list(limit=5).data]
    print(json.dumps(out))
