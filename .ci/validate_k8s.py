"""Offline schema validation of the Kubernetes manifests in examples/.

Run by .ci/run inside a venv with kubernetes-validate (which bundles the
Kubernetes OpenAPI schemas, so no cluster and no network are needed):

    python .ci/validate_k8s.py [--kubernetes-version 1.35.0] [DIR ...]

Every document of every .yaml/.yml file under the given dirs (default
examples/kubernetes and examples/kuberay) is validated strictly (unknown fields
are errors) against the core schemas. RayCluster is a KubeRay CRD whose schema
the package does not carry, so it is checked in two parts: its own fields against
RAYCLUSTER_SCHEMA below (the ray.io/v1 field names of KubeRay's CRD, without the
embedded pod spec), and every pod template it holds as a core v1 PodTemplate,
which covers containers, volumes, probes and security contexts. A kind with no
schema at all fails: nothing passes unchecked.
"""

import argparse
import pathlib
import sys

import jsonschema
import kubernetes_validate
import yaml

# KubeRay ray.io/v1 RayCluster: the fields outside the pod templates.
_GROUP_COMMON = {
    "rayStartParams": {"type": "object", "additionalProperties": {"type": "string"}},
    "template": {"type": "object"},
}
RAYCLUSTER_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayCluster"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["headGroupSpec"],
            "additionalProperties": False,
            "properties": {
                "rayVersion": {"type": "string"},
                "enableInTreeAutoscaling": {"type": "boolean"},
                "autoscalerOptions": {"type": "object"},
                "headServiceAnnotations": {"type": "object"},
                "gcsFaultToleranceOptions": {"type": "object"},
                "managedBy": {"type": "string"},
                "suspend": {"type": "boolean"},
                # The History Server's (feature gate RayClusterHistoryServer), as
                # ray-operator/config/crd/bases/ray.io_rayclusters.yaml has it.
                "historyServerOptions": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "collectorOptions": {
                            "type": "object",
                            "required": ["image"],
                            "additionalProperties": False,
                            "properties": {
                                "image": {"type": "string"},
                                "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                                "resources": {"type": "object"},
                                "env": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["name"],
                                        "additionalProperties": False,
                                        "properties": {
                                            "name": {"type": "string"},
                                            "value": {"type": "string"},
                                            "valueFrom": {"type": "object"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
                "headGroupSpec": {
                    "type": "object",
                    "required": ["template"],
                    "additionalProperties": False,
                    "properties": {
                        **_GROUP_COMMON,
                        "serviceType": {"type": "string"},
                        "headService": {"type": "object"},
                        "enableIngress": {"type": "boolean"},
                    },
                },
                "workerGroupSpecs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["groupName", "template"],
                        "additionalProperties": False,
                        "properties": {
                            **_GROUP_COMMON,
                            "groupName": {"type": "string"},
                            "replicas": {"type": "integer", "minimum": 0},
                            "minReplicas": {"type": "integer", "minimum": 0},
                            "maxReplicas": {"type": "integer", "minimum": 0},
                            "numOfHosts": {"type": "integer", "minimum": 1},
                            "idleTimeoutSeconds": {"type": "integer"},
                            "scaleStrategy": {"type": "object"},
                            "suspend": {"type": "boolean"},
                        },
                    },
                },
            },
        },
    },
}


# What the operator injects into the collector container: the user's env may not
# set them (ray-operator/controllers/ray/utils/validation.go).
_INJECTED = {"POD_IP", "FQ_RAY_IP", "RAY_CLUSTER_NAME", "RAY_CLUSTER_NAMESPACE", "RAY_ROLE", "OWNER_KIND",
             "OWNER_NAME", "EVENTS_PORT"}


def collector_errors(doc):
    """The operator's own checks of collectorOptions (validation.go)."""
    opts = doc.get("spec", {}).get("historyServerOptions", {}).get("collectorOptions")
    if opts is None:
        return []
    env = {e.get("name"): e for e in opts.get("env", [])}
    errors = [f"collectorOptions.env sets {n}, which the operator injects" for n in sorted(_INJECTED & env.keys())]
    backend = env.get("STORAGE_BACKEND", {})
    if "value" not in backend:
        errors.append("collectorOptions.env needs STORAGE_BACKEND as a literal value")
    needs = {"S3": ["S3_REGION"], "GCS": ["GCS_BUCKET"]}.get(str(backend.get("value", "")).upper(), [])
    errors += [f"STORAGE_BACKEND={backend['value']} needs {n} in collectorOptions.env" for n in needs if n not in env]
    return errors


def raycluster_errors(doc, version):
    errors = [e.message for e in jsonschema.Draft7Validator(RAYCLUSTER_SCHEMA).iter_errors(doc)]
    errors += collector_errors(doc)
    spec = doc.get("spec", {})
    groups = [("headGroupSpec", spec.get("headGroupSpec", {}))]
    groups += [(f"workerGroupSpecs[{i}]", g) for i, g in enumerate(spec.get("workerGroupSpecs", []))]
    for where, group in groups:
        pod_template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"{doc['metadata']['name']}-{where}"},
            "template": group.get("template", {}),
        }
        try:
            kubernetes_validate.validate(pod_template, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{where}.template: {e.message} (at {'.'.join(map(str, e.path))})")
        lo, hi, n = group.get("minReplicas"), group.get("maxReplicas"), group.get("replicas")
        if None not in (lo, hi) and lo > hi:
            errors.append(f"{where}: minReplicas {lo} > maxReplicas {hi}")
        if None not in (lo, hi, n) and not lo <= n <= hi:
            errors.append(f"{where}: replicas {n} outside [{lo}, {hi}]")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubernetes-version", default="1.35.0")
    ap.add_argument("dirs", nargs="*", default=["examples/kubernetes", "examples/kuberay"])
    args = ap.parse_args()
    failed, checked = 0, 0
    files = sorted(p for d in args.dirs for p in pathlib.Path(d).rglob("*") if p.suffix in (".yaml", ".yml"))
    if not files:
        print(f"validate_k8s: no manifests under {args.dirs}", file=sys.stderr)
        return 1
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            checked += 1
            what = f"{path}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            if doc.get("kind") == "RayCluster":
                errors = raycluster_errors(doc, args.kubernetes_version)
            else:
                try:
                    kubernetes_validate.validate(doc, args.kubernetes_version, strict=True)
                    errors = []
                except kubernetes_validate.SchemaNotFoundError as e:
                    errors = [f"no schema to validate against: {e}"]
                except kubernetes_validate.ValidationError as e:
                    errors = [f"{e.message} (at {'.'.join(map(str, e.path))})"]
            for e in errors:
                print(f"FAIL {what}: {e}")
            failed += bool(errors)
            if not errors:
                print(f"ok   {what}")
    print(f"validate_k8s: {checked - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
