-- wrk script (bench/soak/run.sh): a non-streamed OpenAI chat completion over
-- keep-alive, each with its own x-request-id (w<thread>-<n>), as a gateway
-- passing on the load generator's ids would send them.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Summarize the order history for customer 42"}]}'

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local n = 0
function request()
  n = n + 1
  wrk.headers["x-request-id"] = "w" .. tostring(tid) .. "-" .. tostring(n)
  return wrk.format()
end
