"""Offline validation of the OpenTelemetry Collector configs in examples/.

Run by .ci/run in the same cached venv as validate_k8s.py (jsonschema and PyYAML
come with check-jsonschema and kubernetes-validate):

    python .ci/validate_otelcol.py [FILE ...]   (default: examples/otel-collector/*.yaml)

No Collector binary is needed (none can be fetched from a package registry) and no
published JSON schema covers a whole Collector config, so this file carries one for
the components the examples use, transcribed from the Collector's own per-component
schemas (config.schema.yaml next to each component, and the config structs:
confighttp client/server, configretry, exporterhelper queue, otlpreceiver,
memorylimiterprocessor, batchprocessor, otlphttpexporter, basicauthextension,
healthcheckextension). Every object is closed (additionalProperties: false), so a
misspelt key fails, as it would in `otelcol validate`. A component type with no
schema here fails too: nothing passes unchecked. Then the references the Collector
resolves at start are checked: every component a pipeline or service.extensions
names is defined, every defined receiver, processor, exporter and extension is used,
every `auth.authenticator` names an extension that service.extensions starts, and
memory_limiter comes first among a pipeline's processors.
"""

import pathlib
import re
import sys

import jsonschema
import yaml

# "10s", "1m30s", "500ms", or a ${env:VAR} the Collector substitutes at start.
ENV = r"\$\{(env:)?[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}"
DURATION = {"type": "string", "pattern": rf"^(([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+|0|{ENV})$"}
STRING = {"type": "string"}
INT = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": rf"^{ENV}$"}]}
BOOL = {"type": "boolean"}
PERCENT = {"type": "integer", "minimum": 0, "maximum": 100}


def closed(props, required=()):
    return {"type": "object", "additionalProperties": False, "properties": props, "required": list(required)}


def nullable(schema):
    """A protocol written with no settings (`http:`) is YAML null."""
    return {"anyOf": [{"type": "null"}, schema]}


TLS_CLIENT = closed(
    {
        "insecure": BOOL,
        "insecure_skip_verify": BOOL,
        "ca_file": STRING,
        "ca_pem": STRING,
        "cert_file": STRING,
        "cert_pem": STRING,
        "key_file": STRING,
        "key_pem": STRING,
        "server_name_override": STRING,
        "min_version": STRING,
        "max_version": STRING,
        "include_system_ca_certs_pool": BOOL,
        "reload_interval": DURATION,
    }
)
TLS_SERVER = closed(
    {k: TLS_CLIENT["properties"][k] for k in ("ca_file", "cert_file", "key_file", "min_version", "max_version")}
    | {"client_ca_file": STRING, "reload_interval": DURATION}
)
AUTH = closed({"authenticator": STRING}, required=["authenticator"])
HEADERS = {"type": "object", "additionalProperties": STRING}

# confighttp.ClientConfig (squashed into otlphttp's config).
HTTP_CLIENT = {
    "endpoint": STRING,
    "proxy_url": STRING,
    "tls": TLS_CLIENT,
    "headers": HEADERS,
    "auth": AUTH,
    "compression": {"enum": ["gzip", "zstd", "zlib", "deflate", "snappy", "lz4", "none", ""]},
    "timeout": DURATION,
    "read_buffer_size": INT,
    "write_buffer_size": INT,
    "max_idle_conns": INT,
    "max_idle_conns_per_host": INT,
    "max_conns_per_host": INT,
    "idle_conn_timeout": DURATION,
    "disable_keep_alives": BOOL,
    "http2_read_idle_timeout": DURATION,
    "http2_ping_timeout": DURATION,
    "force_attempt_http2": BOOL,
}
# configretry.BackOffConfig
RETRY = closed(
    {
        "enabled": BOOL,
        "initial_interval": DURATION,
        "randomization_factor": {"type": "number", "minimum": 0},
        "multiplier": {"type": "number", "minimum": 1},
        "max_interval": DURATION,
        "max_elapsed_time": DURATION,
    }
)
# exporterhelper queue settings
QUEUE = closed(
    {
        "enabled": BOOL,
        "num_consumers": INT,
        "queue_size": INT,
        "sizer": {"enum": ["requests", "items", "bytes"]},
        "storage": STRING,
        "blocking": BOOL,
        "block_on_overflow": BOOL,
        "wait_for_result": BOOL,
        "batch": nullable(closed({"flush_timeout": DURATION, "min_size": INT, "max_size": INT, "sizer": STRING})),
    }
)
OTLPHTTP_EXPORTER = closed(
    HTTP_CLIENT
    | {
        "encoding": {"enum": ["proto", "json"]},
        "traces_endpoint": STRING,
        "metrics_endpoint": STRING,
        "logs_endpoint": STRING,
        "profiles_endpoint": STRING,
        "retry_on_failure": RETRY,
        "sending_queue": QUEUE,
    }
)
# confighttp.ServerConfig plus the OTLP receiver's url paths.
HTTP_SERVER = closed(
    {
        "endpoint": STRING,
        "tls": TLS_SERVER,
        "cors": closed({"allowed_origins": {"type": "array"}, "allowed_headers": {"type": "array"}, "max_age": INT}),
        "auth": AUTH,
        "max_request_body_size": INT,
        "include_metadata": BOOL,
        "response_headers": HEADERS,
        "compression_algorithms": {"type": "array", "items": STRING},
        "read_timeout": DURATION,
        "read_header_timeout": DURATION,
        "write_timeout": DURATION,
        "idle_timeout": DURATION,
        "traces_url_path": STRING,
        "metrics_url_path": STRING,
        "logs_url_path": STRING,
    }
)
GRPC_SERVER = closed(
    {
        "endpoint": STRING,
        "transport": {"enum": ["tcp", "unix"]},
        "tls": TLS_SERVER,
        "auth": AUTH,
        "max_recv_msg_size_mib": INT,
        "max_concurrent_streams": INT,
        "read_buffer_size": INT,
        "write_buffer_size": INT,
        "include_metadata": BOOL,
        "keepalive": {"type": "object"},
    }
)

RECEIVERS = {
    "otlp": closed(
        {"protocols": closed({"http": nullable(HTTP_SERVER), "grpc": nullable(GRPC_SERVER)})}, required=["protocols"]
    ),
}
PROCESSORS = {
    "memory_limiter": closed(
        {
            "check_interval": DURATION,
            "limit_mib": INT,
            "spike_limit_mib": INT,
            "limit_percentage": PERCENT,
            "spike_limit_percentage": PERCENT,
            "min_gc_interval_when_soft_limited": DURATION,
            "min_gc_interval_when_hard_limited": DURATION,
        },
        # The processor refuses to start without a check interval and a limit.
        required=["check_interval"],
    ),
    "batch": closed(
        {
            "timeout": DURATION,
            "send_batch_size": INT,
            "send_batch_max_size": INT,
            "metadata_keys": {"type": "array", "items": STRING},
            "metadata_cardinality_limit": INT,
        }
    ),
}
EXPORTERS = {"otlphttp": OTLPHTTP_EXPORTER, "otlp_http": OTLPHTTP_EXPORTER}
EXTENSIONS = {
    "health_check": closed({"endpoint": STRING, "path": STRING, "tls": TLS_SERVER, "response_body": {"type": "object"}}),
    "basicauth": {
        "oneOf": [
            closed(
                {
                    "client_auth": closed(
                        {"username": STRING, "password": STRING, "username_file": STRING, "password_file": STRING}
                    )
                },
                required=["client_auth"],
            ),
            closed({"htpasswd": closed({"file": STRING, "inline": STRING})}, required=["htpasswd"]),
        ]
    },
}

PIPELINE = closed(
    {
        "receivers": {"type": "array", "minItems": 1, "items": STRING},
        "processors": {"type": "array", "items": STRING},
        "exporters": {"type": "array", "minItems": 1, "items": STRING},
    },
    required=["receivers", "exporters"],
)
ID = r"^[a-z][a-z0-9_]*(/[^/\s]+)?$"  # type[/name]
TOP = closed(
    {
        "receivers": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": ID}},
        "processors": {"type": "object", "propertyNames": {"pattern": ID}},
        "exporters": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": ID}},
        "extensions": {"type": "object", "propertyNames": {"pattern": ID}},
        "connectors": {"type": "object", "propertyNames": {"pattern": ID}},
        "service": closed(
            {
                "extensions": {"type": "array", "items": STRING},
                "pipelines": {
                    "type": "object",
                    "minProperties": 1,
                    "propertyNames": {"pattern": r"^(traces|metrics|logs|profiles)(/[^/\s]+)?$"},
                    "additionalProperties": PIPELINE,
                },
                "telemetry": {"type": "object"},
            },
            required=["pipelines"],
        ),
    },
    required=["receivers", "exporters", "service"],
)

KINDS = {"receivers": RECEIVERS, "processors": PROCESSORS, "exporters": EXPORTERS, "extensions": EXTENSIONS}


def authenticators(v):
    """Every auth.authenticator value anywhere under v."""
    if isinstance(v, dict):
        for k, x in v.items():
            if k == "auth" and isinstance(x, dict) and isinstance(x.get("authenticator"), str):
                yield x["authenticator"]
            else:
                yield from authenticators(x)
    elif isinstance(v, list):
        for x in v:
            yield from authenticators(x)


def errors_of(doc):
    errs = [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in jsonschema.Draft7Validator(TOP).iter_errors(doc)]
    if errs:
        return errs
    for kind, schemas in KINDS.items():
        for cid, cfg in (doc.get(kind) or {}).items():
            ctype = cid.split("/")[0]
            if ctype not in schemas:
                errs.append(f"{kind}.{cid}: no schema for the component type {ctype!r} (add one to .ci/validate_otelcol.py)")
                continue
            # A component written with no settings (`batch:`) is YAML null: its defaults.
            for e in jsonschema.Draft7Validator(schemas[ctype]).iter_errors({} if cfg is None else cfg):
                errs.append(f"{kind}.{cid}.{'.'.join(map(str, e.absolute_path))}: {e.message}")
    service = doc["service"]
    used = {"receivers": set(), "processors": set(), "exporters": set(), "extensions": set(service.get("extensions", []))}
    for name, p in service["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for cid in p.get(kind, []):
                used[kind].add(cid)
                if cid not in (doc.get(kind) or {}) and cid not in (doc.get("connectors") or {}):
                    errs.append(f"service.pipelines.{name}: {kind[:-1]} {cid!r} is not defined under {kind}")
        procs = p.get("processors", [])
        if "memory_limiter" in [c.split("/")[0] for c in procs] and procs[0].split("/")[0] != "memory_limiter":
            errs.append(f"service.pipelines.{name}: memory_limiter must be the first processor")
    for cid in service.get("extensions", []):
        if cid not in (doc.get("extensions") or {}):
            errs.append(f"service.extensions: {cid!r} is not defined under extensions")
    for kind, ids in used.items():
        for cid in doc.get(kind) or {}:
            if cid not in ids:
                errs.append(f"{kind}.{cid}: defined but not used by any pipeline" + (" or service.extensions" if kind == "extensions" else ""))
    for a in authenticators({k: doc.get(k) for k in ("receivers", "exporters")}):
        if a not in service.get("extensions", []):
            errs.append(f"auth.authenticator {a!r} is not an extension listed in service.extensions")
    return errs


def main():
    files = [pathlib.Path(a) for a in sys.argv[1:]] or sorted(pathlib.Path("examples/otel-collector").glob("*.yaml"))
    if not files:
        print("validate_otelcol: no Collector config found", file=sys.stderr)
        return 1
    failed = 0
    for path in files:
        errs = errors_of(yaml.safe_load(path.read_text()))
        for e in errs:
            print(f"FAIL {path}: {e}")
        failed += bool(errs)
        if not errs:
            print(f"ok   {path}")
    print(f"validate_otelcol: {len(files) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
