-- wrk script: a non-streamed OpenAI chat completion over keep-alive; each
-- wrk thread stops after CALLS / THREADS responses (environment variables).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Summarize the order history for customer 42 [rehearse:id=bench]"}]}'

local limit = math.floor(tonumber(os.getenv("CALLS") or "1000000") / tonumber(os.getenv("THREADS") or "1"))
local seen = 0

function response(status, headers, body)
  seen = seen + 1
  if seen >= limit then
    wrk.thread:stop()
  end
end
