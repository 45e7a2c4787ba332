#!/usr/bin/env python3
"""The Kubernetes manifests and the Helm chart, rendered and validated offline.

  check_manifests.py SOURCE_DIR SLUICE [--update]

--update rewrites deploy/kubernetes/ from the chart first (after a change to the chart).

1. Renders deploy/helm/sluice with helm_render (Go text/template + Debian's sprig, built
   here) with its defaults, and requires deploy/kubernetes/ to be exactly that rendering.
2. Renders it again over tests/deploy/helm-values-test.yaml (every optional block on).
3. Validates every object against the Kubernetes OpenAPI definitions kept in
   tests/deploy/kubernetes-schema/definitions.json, strictly: an unknown field is an error,
   as `kubectl apply --validate=strict` makes it; and checks that a misspelt field is caught.
4. Runs `sluice policy check` on each workflow of the ConfigMaps (no warning allowed) and
   checks that the DaemonSet mounts what its arguments name.

Needs go, golang-github-masterminds-sprig-dev, python3-jsonschema and python3-yaml: skips
(77) without them, except under CI=true, where it fails.
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SPRIG = Path("/usr/share/gocode/src/github.com/Masterminds")

try:
    import jsonschema
    import yaml
except ImportError as e:  # reported below, as a skip or a failure
    jsonschema = yaml = None
    IMPORT_ERROR = e


def skip_or_fail(why):
    print(f"check_manifests: {why}", file=sys.stderr)
    sys.exit(1 if os.environ.get("CI") == "true" else 77)


def fail(why):
    print(f"check_manifests: FAIL: {why}", file=sys.stderr)
    sys.exit(1)


def build_renderer(source, tmp):
    """helm_render, built in GOPATH mode from Debian's Go sources (no network, no modules).
    Debian installs sprig and semver without their /v3 module suffix: two links add it."""
    gopath = tmp / "gopath"
    for name in ("sprig", "semver"):
        link = gopath / "src/github.com/Masterminds" / name / "v3"
        link.parent.mkdir(parents=True)
        link.symlink_to(SPRIG / name)
    # Everything go writes stays in the temp dir (no HOME needed, nothing left behind).
    env = dict(os.environ, GO111MODULE="off", GOPATH=f"{gopath}:/usr/share/gocode",
               GOCACHE=str(tmp / "gocache"), GOFLAGS="", GOENV="off", HOME=str(tmp))
    out = tmp / "helm_render"
    subprocess.run(["go", "build", "-o", str(out),
                    str(source / "tests/deploy/helm_render/main.go")], env=env, check=True)
    return out


def render(renderer, chart, *values):
    """{template file name: its text} of one rendering."""
    text = subprocess.run([str(renderer), str(chart), "sluice", "sluice", *map(str, values)],
                          capture_output=True, text=True, check=True).stdout
    docs = {}
    for part in text.split("---\n# Source: sluice/templates/")[1:]:
        name, _, body = part.partition("\n")
        docs[name] = body.rstrip("\n") + "\n"
    return docs


class Validator:
    """Kind -> strict JSON schema, from the kept OpenAPI definitions."""

    def __init__(self, path):
        definitions = json.loads(path.read_text())["definitions"]
        for d in definitions.values():
            self._strict(d)
        # As the API server reads them: a number or a string ("25%", "512Mi").
        for name in ("io.k8s.apimachinery.pkg.util.intstr.IntOrString",
                     "io.k8s.apimachinery.pkg.api.resource.Quantity"):
            if name in definitions:
                definitions[name] = {"anyOf": [{"type": "string"}, {"type": "integer"},
                                               {"type": "number"}]}
        self.kinds = {}
        for name, d in definitions.items():
            for gvk in d.get("x-kubernetes-group-version-kind", []):
                api = gvk["version"] if not gvk["group"] else f'{gvk["group"]}/{gvk["version"]}'
                self.kinds[(api, gvk["kind"])] = name
        self.definitions = definitions

    @classmethod
    def _strict(cls, node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for v in node.values():
                cls._strict(v)
        elif isinstance(node, list):
            for v in node:
                cls._strict(v)

    def errors(self, obj):
        key = (obj.get("apiVersion"), obj.get("kind"))
        if key not in self.kinds:
            return [f"no schema kept for {key}"]
        schema = {"$ref": f"#/definitions/{self.kinds[key]}", "definitions": self.definitions}
        v = jsonschema.Draft4Validator(schema)
        found = [f'{"/".join(map(str, e.absolute_path))}: {e.message}' for e in v.iter_errors(obj)]
        if not obj.get("metadata", {}).get("name"):
            found.append("metadata.name missing")
        return found


def check_workflows(sluice, configmap, tmp):
    policies = tmp / "policies"
    shutil.rmtree(policies, ignore_errors=True)
    policies.mkdir()
    for name, text in configmap["data"].items():
        (policies / name).write_text(text)
    out = subprocess.run([sluice, "policy", "check", str(policies)], capture_output=True,
                         text=True)
    if out.returncode != 0 or "warning" in (out.stdout + out.stderr).lower():
        fail(f"sluice policy check of the ConfigMap's workflows: {out.stdout}{out.stderr}")


def check_daemonset_wiring(daemonset):
    """The paths in serve's arguments are the mounts of the volumes that hold them."""
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    args = dict(a.split("=", 1) for a in container["args"] if a.startswith("--"))
    wanted = {"--policy-dir": "configMap", "--secrets": "secret", "--audit": "hostPath"}
    for flag, source in wanted.items():
        directory = args[flag] if flag == "--policy-dir" else os.path.dirname(args[flag])
        if source not in volumes.get(mounts.get(directory, ""), {}):
            fail(f"{flag} {args[flag]}: {directory} is not a {source} volume's mount")
    if "/run/sluice" not in mounts or "hostPath" not in volumes[mounts["/run/sluice"]]:
        fail("the API socket's directory /run/sluice is not a hostPath")
    selector = daemonset["spec"]["selector"]["matchLabels"]
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in selector.items()):
        fail(f"the pod labels {labels} do not match the selector {selector}")


def check_rendering(docs, validator, sluice, tmp, what):
    objects = {name: yaml.safe_load(text) for name, text in docs.items()}
    for name, obj in objects.items():
        for e in validator.errors(obj):
            fail(f"{what} {name}: {e}")
    by_kind = {o["kind"]: o for o in objects.values()}
    for kind in ("DaemonSet", "ConfigMap", "Secret", "ServiceAccount"):
        if kind not in by_kind:
            fail(f"{what}: no {kind}")
    check_workflows(sluice, by_kind["ConfigMap"], tmp)
    check_daemonset_wiring(by_kind["DaemonSet"])
    yaml.safe_load(by_kind["Secret"]["stringData"]["secrets.yaml"])
    return by_kind


def check_entrypoint(daemonset, tmp):
    """The container's shell entrypoint runs `sluice ARGS...` with the arguments as given."""
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    fake = tmp / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "sluice").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fake / "sluice").chmod(0o755)
    # Run with the cgroup step skipped: /sys/fs/cgroup here is the test machine's.
    script = container["command"][2].replace("/sys/fs/cgroup/cgroup.controllers", "/nonexistent")
    out = subprocess.run([container["command"][0], "-c", script, *container["command"][3:],
                          *container["args"]], capture_output=True, text=True,
                         env=dict(os.environ, PATH=f"{fake}:/usr/bin:/bin"))
    if out.returncode != 0 or out.stdout.splitlines() != container["args"]:
        fail(f"the entrypoint ran sluice with {out.stdout.splitlines()} ({out.stderr})")


def check_required_image(renderer, chart, tmp):
    values = tmp / "no-image.yaml"
    values.write_text('image: {repository: ""}\n')
    out = subprocess.run([str(renderer), str(chart), "sluice", "sluice", str(values)],
                         capture_output=True, text=True)
    if out.returncode == 0 or "image.repository is required" not in out.stderr:
        fail(f"an empty image.repository rendered: {out.stderr}")


def check_validator_catches(validator, daemonset):
    """The check can fail: a misspelt field and a wrong type are both errors."""
    bad = copy.deepcopy(daemonset)
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privilegd"] = True
    if not validator.errors(bad):
        fail("the schema check let a misspelt field (privilegd) through")
    bad = copy.deepcopy(daemonset)
    bad["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "sixty"
    if not validator.errors(bad):
        fail("the schema check let a string through where an integer belongs")


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[3:] not in ([], ["--update"]):
        sys.exit(__doc__)
    source, sluice = Path(sys.argv[1]).resolve(), os.path.abspath(sys.argv[2])
    update = sys.argv[3:] == ["--update"]
    if jsonschema is None:
        skip_or_fail(f"needs python3-jsonschema and python3-yaml ({IMPORT_ERROR})")
    if not shutil.which("go") or not (SPRIG / "sprig").is_dir():
        skip_or_fail("needs golang-go and golang-github-masterminds-sprig-dev")
    chart, plain = source / "deploy/helm/sluice", source / "deploy/kubernetes"
    validator = Validator(source / "tests/deploy/kubernetes-schema/definitions.json")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        renderer = build_renderer(source, tmp)
        defaults = render(renderer, chart)
        if update:
            for p in plain.glob("*.yaml"):
                p.unlink()
            for name, text in defaults.items():
                (plain / name).write_text(text)
        kept = {p.name: p.read_text() for p in plain.glob("*.yaml")}
        if kept != defaults:
            fail(f"deploy/kubernetes/ is not the chart rendered with its defaults "
                 f"(kept {sorted(kept)}, rendered {sorted(defaults)}; run this with --update)")
        objects = check_rendering(defaults, validator, sluice, tmp, "defaults")
        check_rendering(render(renderer, chart, source / "tests/deploy/helm-values-test.yaml"),
                        validator, sluice, tmp, "helm-values-test.yaml")
        check_validator_catches(validator, objects["DaemonSet"])
        check_entrypoint(objects["DaemonSet"], tmp)
        check_required_image(renderer, chart, tmp)
    print(f"check_manifests: ok ({len(defaults)} objects from the chart = deploy/kubernetes/, "
          f"valid against {len(validator.kinds)} kept kinds)")


if __name__ == "__main__":
    main()
