-- wrk script: the same non-streamed OpenAI chat completion the loadgen sends
-- (about 16 prompt tokens, max_tokens 16), over keep-alive.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer rehearse"
wrk.body = '{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"[rehearse:id=bench] the quick brown fox jumps over lazy dogs while shoppers"}]}'
