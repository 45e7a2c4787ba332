#!/usr/bin/env python3
"""Prints bench/run_all.sh's table: one row per figure DESIGN.md's "Numbers to beat" sets, with
sluice's figure, the peer's from the same run, the ratio, p50/p99 where they apply, the goal and
PASS or MISS (n/a when a script did not produce the figure).

Usage: table.py RESULTS AUDIT_JSON AUDIT(0|1) SMOKE(0|1) SECONDS
RESULTS holds "key value" lines written by the scripts (lib.sh's result); AUDIT_JSON is
audit_bench's --benchmark_out."""
import json
import sys


def load_results(path):
    r = {}
    for line in open(path):
        parts = line.split()
        if len(parts) == 2:
            try:
                r[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return r


def load_audit(path):
    """items/s per benchmark: the median over repetitions, or the single run."""
    try:
        benchmarks = json.load(open(path))["benchmarks"]
    except (OSError, ValueError, KeyError):
        return {}
    out = {}
    for b in benchmarks:
        if b.get("error_occurred") or "items_per_second" not in b:
            continue
        # "BM_X/1/4096/0/iterations:16/process_time/real_time" -> "BM_X/1/4096/0"
        name = b["run_name"].split("/process_time")[0].split("/iterations:")[0]
        if b.get("aggregate_name") == "median" or b.get("run_type") == "iteration":
            if b.get("aggregate_name") == "median" or name not in out:
                out[name] = b["items_per_second"]
        elif b.get("aggregate_name") == "cv":  # the repetitions' spread, as a fraction
            out[name + ":cv"] = b["items_per_second"]
    return out


def spread(store, ceiling, store_cv, ceiling_cv, goal):
    """"; repetitions spread 4%/9% (store/ceiling)", and " (within the spread)" when the ratio
    is nearer its goal than the two spreads together: the host's noise may decide the verdict."""
    if store_cv is None or ceiling_cv is None:
        return "", ""
    text = f"; repetitions spread {store_cv * 100:.0f}%/{ceiling_cv * 100:.0f}% (store/ceiling)"
    r = ratio(store, ceiling)
    edge = r is not None and abs(r - goal) / goal < store_cv + ceiling_cv
    return text, " (within the spread)" if edge else ""


def fmt(v, unit=""):
    if v is None:
        return "n/a"
    if v >= 1000:
        return f"{v:,.0f}{unit}"
    return f"{v:.3g}{unit}"


def times(v):
    """A ratio as "2.5x" ("n/a" when unknown)."""
    return "n/a" if v is None else f"{fmt(v)}x"


def ratio(a, b):
    return a / b if a is not None and b else None


def latency(p50, p99, scale=1.0):
    """"p50/p99 ms" (scale converts the figures to ms)."""
    if p50 is None or p99 is None:
        return "n/a"
    return f"{p50 * scale:.3g}/{p99 * scale:.3g} ms"


def verdict(*conds):
    """PASS when every condition holds, MISS when one fails, n/a when one is unknown. A row
    with several goals passes its conditions as (name, condition) pairs, and a MISS then names
    the goals it missed when it met the others ("MISS: 3x Squid ssl-bump")."""
    named = [c if isinstance(c, tuple) else (None, c) for c in conds]
    if any(c is None for _, c in named):
        return "n/a"
    missed = [name for name, c in named if not c]
    if not missed:
        return "PASS"
    if len(missed) < len(named) and all(missed):
        return "MISS: " + ", ".join(missed)
    return "MISS"


def ge(v, t):
    return None if v is None else v >= t


def le(v, t):
    return None if v is None else v <= t


def floor(bare, peer, sluice, name, peer_name):
    """"; NAME 0.97x PEER (sluice 0.55x of it)": where a bare relay, the least a proxy can do,
    lands against the peer, and sluice against it; "" when the bare relay did not run."""
    if not bare or not peer or not sluice:
        return ""
    return f"; {name} {times(bare / peer)} {peer_name} (sluice {times(sluice / bare)} of it)"


def rows(r, audit):
    g = r.get
    mib = lambda k: g(k) / 1048576 if g(k) else None  # noqa: E731
    http = ratio(g("http.sluice.rps"), g("http.squid.rps"))
    reuse = ratio(g("tls.reuse.inspect.rps"), g("tls.reuse.passthrough.rps"))
    bump = ratio(g("tls.reuse.inspect.rps"), g("tls.reuse.squid-bump.rps"))
    new = ratio(g("tls.new.inspect.rps"), g("tls.new.passthrough.rps"))
    connect = ratio(g("connect.sluice.bytes_per_s"), g("connect.direct.bytes_per_s"))
    store = audit.get("BM_ConnectionEventsSustained/1/4096/0")
    signed = audit.get("BM_ConnectionEventsSustained/1/4096/1")
    ceiling = audit.get("BM_RawSqliteCeiling")
    audit_spread, audit_edge = spread(store, ceiling,
                                      audit.get("BM_ConnectionEventsSustained/1/4096/0:cv"),
                                      audit.get("BM_RawSqliteCeiling:cv"), 0.85)
    sign_cost = (1 - signed / store) if store and signed else None
    startup = ratio(g("startup.sluice_ms"), g("startup.bwrap_ms"))
    pool = ratio(g("serve.pool_p50_ms"), g("serve.bwrap_paced_ms"))
    exec_ = ratio(g("serve.exec_p50_ms"), g("serve.bwrap_ms"))

    def ms(p50, p99, scale=1.0):
        return latency(g(p50), g(p99), scale)

    p99_below = (None if g("http.sluice.p99_ms") is None or g("http.squid.p99_ms") is None
                 else g("http.sluice.p99_ms") < g("http.squid.p99_ms"))
    return [
        ("plain HTTP keep-alive vs Squid (1 worker)", fmt(g("http.sluice.rps"), " req/s"),
         fmt(g("http.squid.rps"), " req/s"), http,
         f"{ms('http.sluice.p50_ms', 'http.sluice.p99_ms')} vs "
         f"{ms('http.squid.p50_ms', 'http.squid.p99_ms')}"
         f"{floor(g('http.relay.rps'), g('http.squid.rps'), g('http.sluice.rps'), 'the bare HTTP relay', 'Squid')}",
         ">= 3x req/s, p99 below Squid's", verdict(("3x req/s", ge(http, 3)), ("p99", p99_below))),
        ("TLS inspected keep-alive vs passthrough", fmt(g("tls.reuse.inspect.rps"), " req/s"),
         fmt(g("tls.reuse.passthrough.rps"), " req/s"), reuse,
         f"{ms('tls.reuse.inspect.p50_us', 'tls.reuse.inspect.p99_us', 1e-3)} vs "
         f"{ms('tls.reuse.passthrough.p50_us', 'tls.reuse.passthrough.p99_us', 1e-3)}; "
         f"Squid ssl-bump {fmt(g('tls.reuse.squid-bump.rps'), ' req/s')} "
         f"(sluice {times(bump)}){floor(g('tls.reuse.bare-relay.rps'), g('tls.reuse.passthrough.rps'), g('tls.reuse.inspect.rps'), 'the bare TLS relay', 'passthrough')}",
         ">= 0.7x, and >= 3x Squid ssl-bump", verdict(("0.7x passthrough", ge(reuse, 0.7)), ("3x Squid ssl-bump", ge(bump, 3)))),
        ("TLS inspected, new connection per request", fmt(g("tls.new.inspect.rps"), " req/s"),
         fmt(g("tls.new.passthrough.rps"), " req/s"), new,
         f"{ms('tls.new.inspect.p50_us', 'tls.new.inspect.p99_us', 1e-3)} vs "
         f"{ms('tls.new.passthrough.p50_us', 'tls.new.passthrough.p99_us', 1e-3)}",
         ">= 0.8x passthrough", verdict(ge(new, 0.8))),
        ("CONNECT 100 MiB vs direct loopback", fmt(mib("connect.sluice.bytes_per_s"), " MiB/s"),
         fmt(mib("connect.direct.bytes_per_s"), " MiB/s"), connect,
         "-" + floor(g("connect.relay.bytes_per_s"), g("connect.direct.bytes_per_s"),
                     g("connect.sluice.bytes_per_s"), "the bare splice relay", "direct"),
         ">= 0.9x",
         verdict(ge(connect, 0.9))),
        ("audit rows/s vs raw SQLite ceiling", fmt(store, " rows/s"), fmt(ceiling, " rows/s"),
         ratio(store, ceiling),
         "signing costs " + ("n/a" if sign_cost is None else f"{sign_cost * 100:.1f}%") +
         audit_spread,
         ">= 0.85x; signing <= 1%",
         verdict(("0.85x", ge(ratio(store, ceiling), 0.85)), ("signing", le(sign_cost, 0.01))) +
         audit_edge),
        ("`sluice run /bin/true` vs bwrap --unshare-all", fmt(g("startup.sluice_ms"), " ms"),
         fmt(g("startup.bwrap_ms"), " ms"), startup, "medians", "<= 1.8x",
         verdict(le(startup, 1.8))),
        ("`sluice serve` warm-pool run vs bwrap cold", fmt(g("serve.pool_p50_ms"), " ms"),
         fmt(g("serve.bwrap_paced_ms"), " ms"), pool,
         ms("serve.pool_p50_ms", "serve.pool_p99_ms") + " (paced; bwrap paced alike)",
         "<= 0.5x (p50)", verdict(le(pool, 0.5))),
        ("`sluice serve` session exec vs bwrap cold", fmt(g("serve.exec_p50_ms"), " ms"),
         fmt(g("serve.bwrap_ms"), " ms"), exec_, ms("serve.exec_p50_ms", "serve.exec_p99_ms"),
         "<= 0.4x (p50)", verdict(le(exec_, 0.4))),
    ]

def tls_cpu(r):
    """Where the TLS rows' CPU goes (tls_vs_passthrough.sh's accounting): microseconds of CPU
    per request of each process, inspected beside passthrough; lines only for modes that ran."""
    out = []
    for mode in ("reuse", "new"):
        def us(who, part):
            v = r.get(f"tls.{mode}.{who}.cpu_us.{part}")
            return "n/a" if v is None else f"{v:.1f}"
        if r.get(f"tls.{mode}.inspect.cpu_us.machine") is None:
            continue
        out.append(
            f"TLS {mode}, CPU us per request, inspect vs passthrough: "
            f"proxy user {us('inspect', 'proxy_user')} vs {us('passthrough', 'proxy_user')}, "
            f"sys {us('inspect', 'proxy_sys')} vs {us('passthrough', 'proxy_sys')} "
            f"(audit writer {us('inspect', 'audit')}); "
            f"client {us('inspect', 'client')} vs {us('passthrough', 'client')}; "
            f"nginx {us('inspect', 'nginx')} vs {us('passthrough', 'nginx')}; "
            f"machine {us('inspect', 'machine')} vs {us('passthrough', 'machine')}")
    if r.get("tls.s_time.nginx.cpu_us") is not None:
        out.append(f"openssl s_time -new against nginx directly: "
                   f"{r['tls.s_time.nginx.handshakes_per_s']:.0f} handshakes/s, "
                   f"nginx {r['tls.s_time.nginx.cpu_us']:.1f} us of CPU per handshake")
    return out


def host_costs(r):
    """This machine's kernel costs (bench/host_costs), or None when they were not measured."""
    keys = ("host.page_fault_us", "host.syscall_us", "host.wakeup_us")
    if not all(k in r for k in keys):
        return None
    fault, call, wake = (r[k] for k in keys)
    return (f"this machine: a page fault {fault:.2f} us, a system call {call:.3f} us, "
            f"a wake-up {wake:.2f} us (bench/host_costs; docs/benchmarks.md, "
            f"\"Reading a table from another machine\")")


def main():
    results, audit_json, audit_on, smoke, seconds = sys.argv[1:6]
    figures = load_results(results)
    table = rows(figures, load_audit(audit_json))
    print(f"audit store {'ON' if audit_on == '1' else 'OFF (--no-audit)'}"
          f"{'; SMOKE=1: short runs, the figures mean nothing' if smoke == '1' else ''}; "
          f"{int(seconds) // 60} min {int(seconds) % 60} s in all\n")
    print("| work | sluice | peer | ratio | p50/p99 (sluice vs peer) | goal | |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for work, ours, peer, r, lat, goal, v in table:
        print(f"| {work} | {ours} | {peer} | {times(r)} | {lat} | {goal} | {v} |")
    lines = tls_cpu(figures)
    if lines:
        print()
        print("\n".join(lines))
    host = host_costs(figures)
    if host:
        print()
        print(host)


if __name__ == "__main__":
    main()
