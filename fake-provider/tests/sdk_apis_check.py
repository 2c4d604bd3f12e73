"""Drives the fake provider's Responses, embeddings and Azure OpenAI APIs
with the official OpenAI SDK, unmodified, through 429s its retries honour.

Usage: python3 sdk_apis_check.py BASE_URL   (e.g. http://127.0.0.1:PORT)

The provider allows one request a second (a bucket of one): every call
after the first is refused once with Retry-After, which the SDK waits out
before it tries again. Exits non-zero on the first check that fails.
"""
import sys

import openai

base = sys.argv[1]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


oa = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-rehearse", max_retries=3, timeout=20)

oa.chat.completions.create(
    model="gpt-4o-mini",
    messages=[{"role": "user", "content": "take the bucket [rehearse:id=sdk-warm]"}],
    max_tokens=10,
)

r = oa.responses.create(
    model="gpt-4o-mini",
    input="Say hello [rehearse:id=sdk-resp-plain]",
    instructions="Be brief.",
    max_output_tokens=50,
)
check(r.status == "completed", f"responses plain: status {r.status}")
check(r.usage.output_tokens == 6, f"responses plain: output tokens {r.usage.output_tokens}")
check(len(r.output_text) == 24, f"responses plain: output_text {r.output_text!r}")

stream = oa.responses.create(
    model="gpt-4o-mini",
    input=[{"role": "user", "content": "Stream please [rehearse:id=sdk-resp-stream]"}],
    max_output_tokens=50,
    stream=True,
)
kinds = []
text = ""
usage = None
for event in stream:
    kinds.append(event.type)
    if event.type == "response.output_text.delta":
        text += event.delta
    if event.type == "response.completed":
        usage = event.response.usage
check(kinds[0] == "response.created", f"responses stream: first event {kinds[0]}")
check(kinds[-1] == "response.completed", f"responses stream: last event {kinds[-1]}")
check(len(text) == 24, f"responses stream: text of 6 tokens ({text!r})")
check(usage is not None and usage.output_tokens == 6, "responses stream: usage")

e = oa.embeddings.create(
    model="text-embedding-3-small",
    input=["one [rehearse:id=sdk-emb]", "two", "three"],
)
check(len(e.data) == 3 and len(e.data[0].embedding) > 0, f"embeddings: {len(e.data)} vectors")
check(e.usage.prompt_tokens > 0, f"embeddings: usage {e.usage.prompt_tokens}")

az = openai.AzureOpenAI(
    azure_endpoint=base,
    api_key="azure-key",
    api_version="2024-10-21",
    max_retries=3,
    timeout=20,
)
c = az.chat.completions.create(
    model="gpt-4o-mini",
    messages=[{"role": "user", "content": "Hello Azure [rehearse:id=sdk-azure-chat]"}],
    max_tokens=50,
)
check(c.choices[0].message.role == "assistant", "azure chat: role")
check(c.usage.completion_tokens == 6, f"azure chat: completion tokens {c.usage.completion_tokens}")

try:
    az.chat.completions.create(
        model="no-such-deployment", messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    check(False, "azure: an unknown deployment raises NotFoundError")
except openai.NotFoundError as err:
    check(err.code == "DeploymentNotFound", f"azure: unknown deployment ({err.code})")

print("ALL SDK API CHECKS PASSED", flush=True)
