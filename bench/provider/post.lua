-- wrk script: a non-streamed OpenAI chat completion over keep-alive.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Summarize the order history for customer 42 [rehearse:id=bench]"}]}'
