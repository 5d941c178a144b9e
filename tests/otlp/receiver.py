#!/usr/bin/env python3
"""An OTLP/HTTP logs receiver that decodes with the OpenTelemetry project's own
generated classes (the PyPI package opentelemetry-proto on the protobuf runtime), not
with anything of raylog's: the independent decoder of tests/it/otlp.rs.

  python receiver.py --out FILE        # prints "port N" once listening on 127.0.0.1:0

POST /v1/logs, gzip or not (Content-Encoding), protobuf (application/x-protobuf) or
OTLP/JSON (application/json, parsed strictly by google.protobuf.json_format.Parse:
an unknown or mistyped field is an error). Every LogRecord becomes one JSON line in
FILE: {"encoding", "gzip", "resource", "scope", "record"}, the last three as
MessageToDict gives them (lowerCamelCase names, 64-bit integers as strings, enums
as numbers). A body
that does not decode, or a protobuf message with unknown fields, is answered 400 and
written as {"error": ...}. Success is 200 with an empty ExportLogsServiceResponse in
the request's encoding.
"""
import argparse
import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def unknown_fields(msg, path="request"):
    """Paths of messages holding fields the .proto files do not define."""
    out = []
    if len(UnknownFieldSet(msg)):
        out.append(path)
    for field, value in msg.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        if field.is_repeated:
            for i, v in enumerate(value):
                out += unknown_fields(v, f"{path}.{field.name}[{i}]")
        else:
            out += unknown_fields(value, f"{path}.{field.name}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = open(args.out, "a", encoding="utf-8")
    lock = threading.Lock()

    def write(lines):
        with lock:
            for line in lines:
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
            out.flush()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def answer(self, status, body, ctype):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            ctype = self.headers.get("Content-Type", "")
            is_json = ctype.startswith("application/json")
            zipped = self.headers.get("Content-Encoding", "") == "gzip"
            if self.path == "/v1/traces":
                return self.traces(body, ctype, zipped)
            try:
                if self.path != "/v1/logs":
                    raise ValueError(f"path {self.path}, not /v1/logs")
                if not is_json and not ctype.startswith("application/x-protobuf"):
                    raise ValueError(f"Content-Type {ctype!r}")
                if zipped:
                    body = gzip.decompress(body)
                req = ExportLogsServiceRequest()
                if is_json:
                    json_format.Parse(body.decode("utf-8"), req)
                else:
                    req.ParseFromString(body)
                    bad = unknown_fields(req)
                    if bad:
                        raise ValueError(f"unknown fields in {bad[:5]}")
            except Exception as e:  # noqa: BLE001 - every failure is the test's to see
                return self.refuse(e, ctype, zipped)
            lines = []
            for rl in req.resource_logs:
                resource = json_format.MessageToDict(rl.resource)
                for sl in rl.scope_logs:
                    scope = json_format.MessageToDict(sl.scope)
                    for lr in sl.log_records:
                        lines.append(
                            {
                                "encoding": "json" if is_json else "protobuf",
                                "gzip": zipped,
                                "resource": resource,
                                "scope": scope,
                                "record": json_format.MessageToDict(lr, use_integers_for_enums=True),
                            }
                        )
            write(lines)
            resp = ExportLogsServiceResponse()
            if is_json:
                self.answer(200, json_format.MessageToJson(resp).encode(), "application/json")
            else:
                self.answer(200, resp.SerializeToString(), "application/x-protobuf")

        def refuse(self, e, ctype, zipped):
            """A body that does not decode: written down for the test, answered 400."""
            write([{"error": f"{type(e).__name__}: {e}", "content_type": ctype, "gzip": zipped}])
            self.answer(400, json.dumps({"code": 3, "message": str(e)}).encode(), "application/json")

        def traces(self, body, ctype, zipped):
            """POST /v1/traces (protobuf): one line per span, {"span", "resource", "scope"}."""
            try:
                if not ctype.startswith("application/x-protobuf"):
                    raise ValueError(f"Content-Type {ctype!r}")
                if zipped:
                    body = gzip.decompress(body)
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                bad = unknown_fields(req)
                if bad:
                    raise ValueError(f"unknown fields in {bad[:5]}")
            except Exception as e:  # noqa: BLE001 - every failure is the test's to see
                return self.refuse(e, ctype, zipped)
            lines = []
            for rs in req.resource_spans:
                resource = json_format.MessageToDict(rs.resource)
                for ss in rs.scope_spans:
                    scope = json_format.MessageToDict(ss.scope)
                    for sp in ss.spans:
                        d = json_format.MessageToDict(sp, use_integers_for_enums=True)
                        # Ids as hex (MessageToDict gives base64), as trace backends show them.
                        d["traceId"], d["spanId"] = sp.trace_id.hex(), sp.span_id.hex()
                        d["parentSpanId"] = sp.parent_span_id.hex()
                        for link, lk in zip(d.get("links", []), sp.links):
                            link["traceId"], link["spanId"] = lk.trace_id.hex(), lk.span_id.hex()
                        lines.append({"span": d, "resource": resource, "scope": scope, "gzip": zipped})
            write(lines)
            self.answer(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
