"""llm_clients.py - OpenAI's official `openai` Python client through batchgate
to an LLM pool, as a user would call it: sync and async, streamed and not,
chat, completions and models. Run by test_llm_real.py in the test venv
(scripts/fetch-testdeps):

    llm_clients.py URL MODEL

URL is batchgate's (or a server's, for the same calls direct). Prints one
JSON object: what each call returned (texts, chunk counts, usage, model
ids), for the test to check."""

import asyncio
import json
import sys

import openai

url, model = sys.argv[1], sys.argv[2]
base = url.rstrip("/") + "/v1"
MSG = [{"role": "user", "content": "Name three colours."}]
out = {}

client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=120)
out["models"] = [m.id for m in client.models.list().data]
try:   # llama-server itself has no /v1/models/{id}
    out["retrieve"] = client.models.retrieve(model).id
except openai.NotFoundError:
    out["retrieve"] = None

r = client.chat.completions.create(model=model, messages=MSG, max_tokens=12, temperature=0)
out["chat"] = {"text": r.choices[0].message.content, "usage": r.usage.model_dump(),
               "finish": r.choices[0].finish_reason}

r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=6,
                              temperature=0)
out["completion"] = {"text": r.choices[0].text, "usage": r.usage.model_dump()}

parts, usage, chunks = [], None, 0
with client.chat.completions.create(model=model, messages=MSG, max_tokens=12, temperature=0,
                                    stream=True, stream_options={"include_usage": True}) as s:
    for c in s:
        chunks += 1
        if c.choices and c.choices[0].delta.content:
            parts.append(c.choices[0].delta.content)
        if c.usage:
            usage = c.usage.model_dump()
out["chat_stream"] = {"text": "".join(parts), "chunks": chunks, "usage": usage}

parts, usage_seen = [], False
for c in client.chat.completions.create(model=model, messages=MSG, max_tokens=12,
                                        temperature=0, stream=True):
    if c.choices and c.choices[0].delta.content:
        parts.append(c.choices[0].delta.content)
    usage_seen = usage_seen or bool(getattr(c, "usage", None))
out["chat_stream_no_usage"] = {"text": "".join(parts), "usage_seen": usage_seen}

try:
    client.chat.completions.create(model="no-such-model", messages=MSG, max_tokens=2)
    out["unknown"] = None
except openai.NotFoundError as e:
    out["unknown"] = {"status": e.status_code, "param": e.body.get("param") if isinstance(
        e.body, dict) else None}


async def run_async():
    ac = openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0, timeout=120)
    r = await ac.chat.completions.create(model=model, messages=MSG, max_tokens=12, temperature=0)
    text = r.choices[0].message.content
    parts = []
    stream = await ac.completions.create(model=model, prompt="The capital of France is",
                                         max_tokens=6, temperature=0, stream=True)
    async for c in stream:
        if c.choices and c.choices[0].text:
            parts.append(c.choices[0].text)
    await ac.close()
    return {"chat": text, "completion_stream": "".join(parts)}

out["async"] = asyncio.run(run_async())
print(json.dumps(out))
