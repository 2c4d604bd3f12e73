-- wrk script: POST one chat completion per request, paced.
--
-- wrk is closed-loop: each connection sends, waits for the answer, then
-- waits delay() ms. With C connections and PACE_MS, the offered rate is about
-- C * 1000 / (PACE_MS + latency): 10 connections and 10 ms give ~1,000 req/s.
-- The rate wrk reports (Requests/sec) is the one to quote.

local pace_ms = tonumber(os.getenv("PACE_MS") or "10")
local prompt = "[rehearse:id=bench] " .. string.rep("Summarize the quarterly report. ", 12)

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-request-id"] = "bench"
wrk.body = '{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"'
  .. prompt .. '"}]}'

function delay()
  return pace_ms
end
