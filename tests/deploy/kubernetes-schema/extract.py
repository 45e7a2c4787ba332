#!/usr/bin/env python3
"""Keeps, from the Kubernetes OpenAPI v2 document, only what sluice's manifests use.

  extract.py SWAGGER_JSON > definitions.json

The input is the API server's published OpenAPI (swagger 2.0) document, e.g.
kubernetes-client/python's kubernetes/swagger.json.unprocessed. The output holds the kinds
below and every definition they reach through $ref, without descriptions (they are most of
its size and validate nothing). check_manifests.py validates against it offline.
"""
import json
import sys

KINDS = [
    "io.k8s.api.apps.v1.DaemonSet",
    "io.k8s.api.core.v1.ConfigMap",
    "io.k8s.api.core.v1.Secret",
    "io.k8s.api.core.v1.ServiceAccount",
]


def refs(node):
    """Every definition name a schema node refers to."""
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"].rsplit("/", 1)[-1]
        for v in node.values():
            yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def main():
    spec = json.load(open(sys.argv[1]))
    definitions = spec["definitions"]
    keep, todo = {}, list(KINDS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = strip(definitions[name])
        todo.extend(refs(definitions[name]))
    json.dump({"info": spec["info"], "kinds": KINDS, "definitions": dict(sorted(keep.items()))},
              sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
