"""Prints one line of figures from a loadgen run's summary.json."""
import json, sys

s = json.load(open(sys.argv[1]))
schedule_s = float(sys.argv[2])
ok = next(o for o in s["outcomes"] if o["outcome"] == "ok")
errors = sum(o["first_attempts"] + o["retries"] for o in s["outcomes"] if o["outcome"] != "ok")
lag = s["send_lag"]
print(
    f"people {s['people']}  sent/s {s['attempts'] / schedule_s:.0f}  ok {ok['first_attempts']}  "
    f"not ok {errors}  latency p50 {ok['latency']['p50_us'] / 1000:.2f} ms  "
    f"p99 {ok['latency']['p99_us'] / 1000:.2f} ms  send lag p50 {lag['p50_us']} us  "
    f"p99 {lag['p99_us']} us  max {lag['max_us']} us  valid {s['valid']}"
)
