"""Figures of the load generator's benchmark runs (bench/loadgen/run.sh).

  summary.py SUMMARY.json SECONDS
      one line from a `rehearse load` run's summary.json
  summary.py SUMMARY.json SECONDS --row LABEL LOAD "CPU% USER SYS RSS"
  summary.py OHA.json SECONDS --oha --row LABEL LOAD "CPU% USER SYS RSS"
      one tab-separated row (COLUMNS) of a rehearse or an oha run, with
      /usr/bin/time's figures (-f "%P %U %S %M") and the load average
  summary.py --medians FILE.tsv
      the medians of the rows of each kind (the label without its run
      number), and the ratios that compare them
"""
import json
import statistics
import sys

COLUMNS = [
    "label", "load1", "cpu_pct", "user_s", "sys_s", "rss_mb", "sent_per_s", "ok", "not_ok",
    "send_lag_p50_us", "send_lag_p99_us", "send_lag_max_us", "latency_p50_ms", "latency_p99_ms",
    "valid", "connections",
]


def rehearse_figures(s, seconds):
    ok = next(o for o in s["outcomes"] if o["outcome"] == "ok")
    not_ok = sum(o["first_attempts"] + o["retries"] for o in s["outcomes"] if o["outcome"] != "ok")
    lag = s["send_lag"]
    return {
        "sent_per_s": round(s["attempts"] / seconds),
        "ok": ok["first_attempts"] + ok["retries"],
        "not_ok": not_ok,
        "send_lag_p50_us": lag["p50_us"],
        "send_lag_p99_us": lag["p99_us"],
        "send_lag_max_us": lag["max_us"],
        "latency_p50_ms": ok["latency"]["p50_us"] / 1000,
        "latency_p99_ms": ok["latency"]["p99_us"] / 1000,
        "valid": s["valid"],
        # Older summaries (before connections_opened) say nothing.
        "connections": s.get("connections_opened", "-"),
    }


def oha_figures(s, seconds):
    n = sum(s.get("statusCodeDistribution", {}).values())
    lp = s.get("latencyPercentiles", {})
    return {
        "sent_per_s": round(n / seconds),
        "ok": s.get("statusCodeDistribution", {}).get("200", 0),
        "not_ok": n - s.get("statusCodeDistribution", {}).get("200", 0)
        + sum(s.get("errorDistribution", {}).values()),
        "send_lag_p50_us": "-",
        "send_lag_p99_us": "-",
        "send_lag_max_us": "-",
        "latency_p50_ms": round((lp.get("p50") or 0) * 1000, 2),
        "latency_p99_ms": round((lp.get("p99") or 0) * 1000, 2),
        "valid": "-",
        "connections": "-",
    }


def row(figures, label, load1, time):
    cpu, user, sys_s, rss = time.split()
    figures.update(
        label=label, load1=load1, cpu_pct=cpu.rstrip("%"), user_s=user, sys_s=sys_s,
        rss_mb=round(int(rss) / 1024, 1),
    )
    return "\t".join(str(figures[c]) for c in COLUMNS)


def medians(path):
    rows = [dict(zip(COLUMNS, line.rstrip("\n").split("\t"))) for line in open(path) if line.strip()]
    for r in rows:
        r.setdefault("connections", "-")
    kinds = {}
    for r in rows:
        kinds.setdefault(r["label"].rsplit("-", 1)[0], []).append(r)

    def med(rs, col):
        vals = [float(r[col]) for r in rs if r[col] not in ("-", "")]
        return statistics.median(vals) if vals else None

    shown = ["load1", "cpu_pct", "user_s", "sys_s", "rss_mb", "sent_per_s", "not_ok",
             "send_lag_p50_us", "send_lag_p99_us", "send_lag_max_us", "latency_p50_ms",
             "latency_p99_ms", "connections"]
    print("   medians | " + " | ".join(shown) + " | valid runs")
    out = {}
    for kind, rs in kinds.items():
        m = {c: med(rs, c) for c in shown}
        out[kind] = m
        valid = sum(1 for r in rs if r["valid"] == "True")
        cells = ["-" if v is None else f"{v:g}" for v in m.values()]
        print(f"   {kind} ({len(rs)} runs) | " + " | ".join(cells)
              + f" | {valid if rs[0]['valid'] != '-' else '-'} of {len(rs)}")
    o = out.get("oha")
    for kind, r in out.items():
        if kind.startswith("rehearse") and o and o["latency_p99_ms"]:
            print(f"   {kind} / oha (medians): latency p99 {r['latency_p99_ms'] / o['latency_p99_ms']:.2f}x,"
                  f" CPU {r['cpu_pct'] / o['cpu_pct']:.2f}x, RSS {r['rss_mb'] / o['rss_mb']:.2f}x")
    w, n = out.get("records"), out.get("no-records")
    if w and n:
        cw, cn = w["user_s"] + w["sys_s"], n["user_s"] + n["sys_s"]
        print(f"   CPU seconds with records / without (medians): {cw:.2f} / {cn:.2f} = {cw / cn:.3f}x")


def main(argv):
    if argv[1] == "--medians":
        medians(argv[2])
        return
    s = json.load(open(argv[1]))
    seconds = float(argv[2])
    oha = "--oha" in argv
    figures = oha_figures(s, seconds) if oha else rehearse_figures(s, seconds)
    if "--row" in argv:
        i = argv.index("--row")
        print(row(figures, argv[i + 1], argv[i + 2], argv[i + 3]))
        return
    f = figures
    print(
        f"people {s['people']}  sent/s {f['sent_per_s']}  ok {f['ok']}  not ok {f['not_ok']}  "
        f"latency p50 {f['latency_p50_ms']:.2f} ms  p99 {f['latency_p99_ms']:.2f} ms  "
        f"send lag p50 {f['send_lag_p50_us']} us  p99 {f['send_lag_p99_us']} us  "
        f"max {f['send_lag_max_us']} us  valid {f['valid']}  connections {f['connections']}"
    )


if __name__ == "__main__":
    main(sys.argv)
