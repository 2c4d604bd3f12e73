"""Drives the fake provider with the official OpenAI and Anthropic SDKs.

Usage: python3 sdk_check.py BASE_URL   (e.g. http://127.0.0.1:PORT)

Exits non-zero with a message on the first check that fails.
"""
import sys

import anthropic
import openai

base = sys.argv[1]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


oa = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-rehearse", max_retries=0, timeout=20)

r = oa.chat.completions.create(
    model="gpt-4o-mini",
    messages=[{"role": "user", "content": "Say hello [rehearse:id=sdk-openai-plain]"}],
    max_tokens=50,
)
check(r.choices[0].message.role == "assistant", "openai plain: role")
check(r.usage.completion_tokens == 6, f"openai plain: completion tokens {r.usage.completion_tokens}")
check(r.usage.total_tokens == r.usage.prompt_tokens + 6, "openai plain: total tokens")
check(len(r.choices[0].message.content) > 0, "openai plain: content")

raw = oa.chat.completions.with_raw_response.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=10
)
check(raw.headers.get("x-ratelimit-limit-tokens") == "3000", "openai: rate-limit headers reach the SDK")

stream = oa.chat.completions.create(
    model="gpt-4o-mini",
    messages=[{"role": "user", "content": "Stream please [rehearse:id=sdk-openai-stream]"}],
    max_tokens=50,
    stream=True,
    stream_options={"include_usage": True},
)
text = ""
usage = None
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        text += chunk.choices[0].delta.content
    if chunk.usage is not None:
        usage = chunk.usage
check(len(text) == 24, f"openai stream: text of 6 tokens ({text!r})")
check(usage is not None and usage.completion_tokens == 6, "openai stream: usage chunk")

try:
    oa.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "too big"}], max_tokens=2990
    )
    check(False, "openai: over quota raises RateLimitError")
except openai.RateLimitError as e:
    ra = e.response.headers.get("retry-after-ms")
    check(ra is not None and int(ra) > 0, f"openai: RateLimitError with retry-after-ms {ra}")

an = anthropic.Anthropic(base_url=base, api_key="sk-ant-rehearse", max_retries=0, timeout=20)
m = an.messages.create(
    model="claude-3-5-haiku-latest",
    max_tokens=50,
    system="Be brief.",
    messages=[{"role": "user", "content": "Hello [rehearse:id=sdk-anthropic-plain]"}],
)
check(m.type == "message" and m.content[0].type == "text", "anthropic plain: shape")
check(m.usage.output_tokens == 6, f"anthropic plain: output tokens {m.usage.output_tokens}")
check(m.stop_reason == "end_turn", "anthropic plain: stop reason")

with an.messages.stream(
    model="claude-3-5-haiku-latest",
    max_tokens=50,
    messages=[{"role": "user", "content": "Stream [rehearse:id=sdk-anthropic-stream]"}],
) as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
check(len(streamed) == 24, f"anthropic stream: text ({streamed!r})")
check(final.usage.output_tokens == 6, "anthropic stream: final usage")

models = oa.models.list()
check(any(x.id == "gpt-4o-mini" for x in models.data), "openai: models list")

print("ALL SDK CHECKS PASSED", flush=True)
