#!/usr/bin/env python3
"""A minimal OTLP/HTTP logs receiver, for measuring the `otlp` sink (capture_sink.py
speaks Loki and Elasticsearch only).

  otlp_sink.py --port 4318 [--count] [--out received.ndjson] [--outage 5:15]
               [--status 503] [--reject-every N]

POST /v1/logs (any path ending in it): protobuf or JSON (`Content-Type`), gzip or
not (`Content-Encoding`). Answers 200 with an empty body (a full success).
GET /ready, GET /stats -> JSON counters {requests, bytes (on the wire), raw_bytes
(decompressed), records, rejected_requests, bad_requests, cpu_s (this process)}.

Three modes, cheapest first:
- default: counts requests and wire bytes only; nothing is decompressed. For
  CPU measurements of the agent on a small machine, where the receiver shares the
  cores with it.
- --count: decompresses and counts LogRecords exactly, walking the protobuf down
  to the ScopeLogs level (a LogRecord is skipped by its length, never decoded), or
  in JSON counting `"timeUnixNano"` keys (one per LogRecord, the agent writes no
  other; a message holding that text comes out escaped, `\\"`).
- --out FILE: decodes every record to one JSON line
  {"api": "otlp", "doc": {"time", "body", "attributes": {key: value}}} for
  checkdelivery.py (which finds seq=<n> in `doc`).
Faults (as capture_sink.py): --outage A:B answers --status from second A to B after
start; --reject-every N answers 429 to every Nth request.
Standard library only.
"""
import argparse, json, os, struct, threading, time, zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def varint(b, pos):
    v = shift = 0
    while True:
        c = b[pos]
        pos += 1
        v |= (c & 0x7f) << shift
        shift += 7
        if c < 0x80:
            return v, pos


def fields(b, start=0, end=None):
    """(field, wire type, value or (start, end) for LEN) of a message."""
    pos = start
    end = len(b) if end is None else end
    while pos < end:
        key, pos = varint(b, pos)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = varint(b, pos)
            yield f, wt, v
        elif wt == 2:
            n, pos = varint(b, pos)
            yield f, wt, (pos, pos + n)
            pos += n
        elif wt == 1:
            yield f, wt, b[pos:pos + 8]
            pos += 8
        elif wt == 5:
            yield f, wt, b[pos:pos + 4]
            pos += 4
        else:
            raise ValueError("wire type %d" % wt)


def scope_logs(b):
    """(start, end) of every ScopeLogs of an ExportLogsServiceRequest."""
    for f, wt, rl in fields(b):
        if f == 1 and wt == 2:
            for f2, wt2, sl in fields(b, *rl):
                if f2 == 2 and wt2 == 2:
                    yield sl


def count_pb(b):
    """LogRecords (ScopeLogs field 2), each skipped by its length."""
    n = 0
    for start, end in scope_logs(b):
        pos = start
        while pos < end:
            key = b[pos]
            pos += 1
            if key & 0x80:
                key, pos = varint(b, pos - 1)
            wt = key & 7
            if wt == 2:
                ln = b[pos]
                pos += 1
                if ln & 0x80:
                    ln, pos = varint(b, pos - 1)
                pos += ln
                n += (key >> 3) == 2
            elif wt == 0:
                _, pos = varint(b, pos)
            elif wt == 1:
                pos += 8
            elif wt == 5:
                pos += 4
            else:
                raise ValueError("wire type %d" % wt)
    return n


def any_pb(b, start, end):
    """An AnyValue as a Python value (strings, ints, bools, doubles, lists, dicts)."""
    out = None
    for f, wt, v in fields(b, start, end):
        if f == 1:
            out = b[v[0]:v[1]].decode("utf-8", "replace")
        elif f == 2:
            out = bool(v)
        elif f == 3:
            out = v - (1 << 64) if v >= 1 << 63 else v
        elif f == 4:
            out = struct.unpack("<d", v)[0]
        elif f == 5:
            out = [any_pb(b, *e) for g, _, e in fields(b, *v) if g == 1]
        elif f == 6:
            out = dict(kv_pb(b, *e) for g, _, e in fields(b, *v) if g == 1)
    return out


def kv_pb(b, start, end):
    k, val = "", None
    for f, wt, v in fields(b, start, end):
        if f == 1:
            k = b[v[0]:v[1]].decode("utf-8", "replace")
        elif f == 2:
            val = any_pb(b, *v)
    return k, val


def records_pb(b):
    for start, end in scope_logs(b):
        for f, wt, v in fields(b, start, end):
            if f != 2:
                continue
            rec = {"time": 0, "body": None, "attributes": {}}
            for g, _, w in fields(b, *v):
                if g == 1:
                    rec["time"] = int.from_bytes(w, "little")
                elif g == 5:
                    rec["body"] = any_pb(b, *w)
                elif g == 6:
                    k, val = kv_pb(b, *w)
                    rec["attributes"][k] = val
            yield rec


def records_json(b):
    def any_json(v):
        if "kvlistValue" in v:
            return {kv["key"]: any_json(kv.get("value", {})) for kv in v["kvlistValue"].get("values", [])}
        if "arrayValue" in v:
            return [any_json(x) for x in v["arrayValue"].get("values", [])]
        return next(iter(v.values()), None)
    for rl in json.loads(b).get("resourceLogs", []):
        for sl in rl.get("scopeLogs", []):
            for r in sl.get("logRecords", []):
                yield {"time": int(r.get("timeUnixNano", "0")), "body": any_json(r.get("body", {})),
                       "attributes": {kv["key"]: any_json(kv.get("value", {})) for kv in r.get("attributes", [])}}


class State:
    def __init__(self, a):
        self.a = a
        self.start = time.time()
        self.lock = threading.Lock()
        self.out = open(a.out, "a", encoding="utf-8") if a.out else None
        self.c = {"requests": 0, "bytes": 0, "raw_bytes": 0, "records": 0, "rejected_requests": 0, "bad_requests": 0,
                  "trace_requests": 0, "trace_bytes": 0}


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, code, body=b"", ctype="application/x-protobuf"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        S = self.server.st
        if self.path.startswith("/stats"):
            c = dict(S.c)
            t = os.times()
            c["cpu_s"] = round(t.user + t.system, 2)
            return self.reply(200, json.dumps(c).encode(), "application/json")
        return self.reply(200, b"ready", "text/plain")

    def do_POST(self):
        S = self.server.st
        a = S.a
        n = int(self.headers.get("Content-Length", 0))
        b = self.rfile.read(n)
        with S.lock:
            S.c["requests"] += 1
            S.c["bytes"] += n
            nreq = S.c["requests"]
        if self.path.split("?")[0].endswith("/v1/traces"):
            # Spans (`traces = true`): counted as requests and bytes only.
            S.c["trace_requests"] += 1
            S.c["trace_bytes"] += n
            return self.reply(200, b"", "application/x-protobuf")
        if not self.path.split("?")[0].endswith("/v1/logs"):
            return self.reply(404, b"no route", "text/plain")
        el = time.time() - S.start
        if a.outage and a.outage[0] <= el < a.outage[1]:
            S.c["rejected_requests"] += 1
            return self.reply(a.status, b"simulated outage", "text/plain")
        if a.reject_every and nreq % a.reject_every == 0:
            S.c["rejected_requests"] += 1
            return self.reply(429, b"rate limited", "text/plain")
        is_json = "json" in self.headers.get("Content-Type", "")
        if not (a.count or S.out):
            return self.reply(200, ctype="application/json" if is_json else "application/x-protobuf")
        try:
            if self.headers.get("Content-Encoding", "").lower() == "gzip":
                b = zlib.decompress(b, 31)
            if S.out:
                recs = list(records_json(b) if is_json else records_pb(b))
                k = len(recs)
            else:
                k = b.count(b'"timeUnixNano"') if is_json else count_pb(b)
        except Exception as e:
            S.c["bad_requests"] += 1
            return self.reply(400, ("bad request: %s" % e).encode(), "text/plain")
        with S.lock:
            S.c["raw_bytes"] += len(b)
            S.c["records"] += k
            if S.out:
                for r in recs:
                    S.out.write(json.dumps({"api": "otlp", "doc": r}, ensure_ascii=False) + "\n")
                S.out.flush()
        return self.reply(200, ctype="application/json" if is_json else "application/x-protobuf")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=4318)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--count", action="store_true", help="decompress and count LogRecords")
    p.add_argument("--out")
    p.add_argument("--outage")
    p.add_argument("--status", type=int, default=503)
    p.add_argument("--reject-every", type=int, default=0)
    a = p.parse_args()
    a.outage = tuple(float(x) for x in a.outage.split(":")) if a.outage else None
    srv = ThreadingHTTPServer((a.host, a.port), H)
    srv.daemon_threads = True
    srv.st = State(a)
    print("otlp sink on %s:%d" % (a.host, a.port), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
