#!/usr/bin/env python3
"""Checks schemas/api.v1.yaml (the `sluice serve` API) and validates real responses against it.

  check_api.py                          check the document: YAML loads, every $ref resolves,
                                        every components/schemas entry is a valid JSON Schema
                                        2020-12, Receipt is receipt.v1 (+ caller), every
                                        example validates, and a set of
                                        known-good and known-bad instances (below) is judged
                                        right; prints "N passed, N failed"
  check_api.py COMPONENT FILE.json      validate one JSON document ("-": stdin) against
                                        #/components/schemas/COMPONENT; exit 0 valid,
                                        1 invalid (every error printed as /json/pointer: message)
  check_api.py --ndjson COMPONENT FILE  the same for every line of an NDJSON stream; with
                                        StreamEvent also checks that the last line, and only
                                        the last, is a `receipt` or `error` event
  check_api.py --list                   the component names

Exit 2 for usage errors (unknown component, unreadable file). Exit 77 (ctest SKIP) when PyYAML
or jsonschema is missing outside CI; 1 in CI (Debian: python3-yaml python3-jsonschema).

From Python: `sys.path.insert(0, "tests/schemas"); from check_api import validate`;
validate("Receipt", obj) returns None or raises jsonschema.ValidationError, errors(...) lists
the problems as strings.

$refs between components ("#/components/schemas/X") and into schemas/receipt.v1.schema.json
(a relative reference, "receipt.v1.schema.json#/properties/exit") are resolved with a registry
rooted at the schemas/ directory: the `referencing` library where jsonschema has it (>= 4.18),
else jsonschema's RefResolver (Debian 12 ships 4.10).
"""
import json
import os
import sys
from functools import lru_cache
from pathlib import Path
from urllib.parse import urldefrag


def _fail_or_skip(msg):
    ci = os.environ.get("CI", "").lower() in ("1", "true")
    print(("FAIL: " if ci else "SKIP: ") + msg, file=sys.stderr)
    sys.exit(1 if ci else 77)


try:
    import jsonschema
    import yaml
    from jsonschema import Draft202012Validator
except ImportError as e:  # pragma: no cover - environment problem
    _fail_or_skip(f"{e}: install python3-jsonschema and python3-yaml (scripts/install-deps.sh)")

try:  # jsonschema >= 4.18
    import referencing
    import referencing.jsonschema
except ImportError:
    referencing = None

SCHEMAS_DIR = Path(__file__).resolve().parents[2] / "schemas"
API_FILE = SCHEMAS_DIR / "api.v1.yaml"
RECEIPT_FILE = SCHEMAS_DIR / "receipt.v1.schema.json"
API_URI = API_FILE.as_uri()
RECEIPT_URI = RECEIPT_FILE.as_uri()
DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _DateSafeLoader(yaml.SafeLoader):
    """YAML 1.1 turns unquoted timestamps into datetime objects; JSON has none, keep strings."""


_DateSafeLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@lru_cache(maxsize=None)
def load_api():
    with open(API_FILE, encoding="utf-8") as f:
        return yaml.load(f, Loader=_DateSafeLoader)


@lru_cache(maxsize=None)
def load_receipt():
    with open(RECEIPT_FILE, encoding="utf-8") as f:
        return json.load(f)


def component_names():
    return sorted(load_api()["components"]["schemas"])


@lru_cache(maxsize=None)
def _registry():
    receipt = load_receipt()
    api = referencing.Resource(contents=load_api(),
                               specification=referencing.jsonschema.DRAFT202012)
    rec = referencing.Resource.from_contents(receipt)
    # The receipt is reachable by its file (what api.v1.yaml's relative refs resolve to) and by
    # its $id (what its own internal refs resolve against).
    return referencing.Registry().with_resources(
        [(API_URI, api), (RECEIPT_URI, rec), (receipt["$id"], rec)])


@lru_cache(maxsize=None)
def validator(component_name):
    """A Draft 2020-12 validator for #/components/schemas/<component_name>."""
    if component_name not in load_api()["components"]["schemas"]:
        raise KeyError(f"no component schema '{component_name}' in {API_FILE.name} "
                       f"(have: {', '.join(component_names())})")
    root = {"$schema": DIALECT, "$ref": f"{API_URI}#/components/schemas/{component_name}"}
    if referencing is not None:
        return Draft202012Validator(root, registry=_registry())
    receipt = load_receipt()
    resolver = jsonschema.RefResolver(
        base_uri=API_URI, referrer=load_api(),
        store={API_URI: load_api(), RECEIPT_URI: receipt, receipt["$id"]: receipt})
    return Draft202012Validator(root, resolver=resolver)


def _pointer(path):
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _short(text, limit=300):
    return text if len(text) <= limit else text[:limit] + "..."


def _closest_alternative(error):
    """For a failed oneOf/anyOf: the errors of the alternative that came closest, preferring
    one whose `type` (the stream events' tag) matched, then the one with the fewest errors."""
    groups = {}
    for sub in error.context:
        groups.setdefault(sub.relative_schema_path[0], []).append(sub)

    def score(subs):
        tag_failed = any(list(sub.relative_path) == ["type"] for sub in subs)
        return (tag_failed, len(subs))

    return min(groups.values(), key=score)


def _lines(error):
    if not error.context:
        return [f"{_pointer(error.absolute_path)}: {_short(error.message)}"]
    head = f"{_pointer(error.absolute_path)}: matches none of the {error.validator} alternatives"
    out = []
    for sub in _closest_alternative(error):
        out += _lines(sub)
    return [head + "; closest: " + " | ".join(out)]


def errors(component_name, instance):
    """Every reason `instance` is not a valid <component_name>, as '/pointer: message' lines."""
    out = []
    for e in sorted(validator(component_name).iter_errors(instance),
                    key=lambda e: list(map(str, e.absolute_path))):
        out += _lines(e)
    return out


def validate(component_name, instance):
    """Returns None when `instance` is a valid <component_name>; raises ValidationError if not."""
    best = jsonschema.exceptions.best_match(validator(component_name).iter_errors(instance))
    if best is not None:
        raise best


# ---- checking the document itself ------------------------------------------------------------

def _resolve_pointer(doc, fragment):
    node = doc
    for raw in fragment.lstrip("/").split("/") if fragment.strip("/") else []:
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            node = node[int(key)]
        else:
            node = node[key]
    return node


def _walk_refs(node, where=""):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield where, v
            else:
                yield from _walk_refs(v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk_refs(v, f"{where}/{i}")


def _media_examples(api):
    """(where, component, example) for examples next to a schema that is a component $ref."""
    prefix = "#/components/schemas/"
    for where, node in _walk_media(api):
        ref = node.get("schema", {}).get("$ref", "")
        if not ref.startswith(prefix):
            continue
        name = ref[len(prefix):]
        if "example" in node:
            yield where + "/example", name, node["example"]
        for key, ex in node.get("examples", {}).items():
            if "value" in ex:
                yield f"{where}/examples/{key}", name, ex["value"]


def _walk_media(node, where=""):
    if isinstance(node, dict):
        if "content" in node and isinstance(node["content"], dict):
            for mt, media in node["content"].items():
                if isinstance(media, dict):
                    yield f"{where}/content/{mt}", media
        for k, v in node.items():
            yield from _walk_media(v, f"{where}/{k}")


def _sample_receipt():
    """A receipt as `sluice serve` answers it (receipt.v1 + caller)."""
    stream = {"bytes": 6, "truncated": False, "text": "hello\n"}
    return {
        "receipt_version": 1, "execution_id": "ex-3f2a9c1e55d0a7b1", "workflow": "shell",
        "policy_sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "argv": ["echo", "hello"], "started_at": "2025-06-01T12:00:00.000Z",
        "ended_at": "2025-06-01T12:00:00.004Z", "duration_ms": 4,
        "exit": {"code": 0, "signal": None, "status": 0}, "limit_hit": None,
        "limits": {"timeout_ms": 30000, "cpu_time_ms": 20000, "memory": 536870912, "pids": 64,
                   "output": 1048576, "disk": 104857600, "file_size": 104857600,
                   "open_files": 256, "network": "none"},
        "usage": {"cpu_user_ms": 1, "cpu_sys_ms": 1, "max_rss_bytes": 1048576, "pids_peak": 1},
        "stdout": stream, "stderr": {"bytes": 0, "truncated": False, "text": ""},
        "artifacts": [{"path": "result.json", "bytes": 2,
                       "sha256": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}],
        "artifacts_truncated": None,
        "network": {"mode": "none", "allowed": 0, "denied": 0, "failed": 0, "connections": 0,
                    "requests": 0, "bytes_out": 0, "bytes_in": 0, "denials": [], "failures": [],
                    "dns": {"queries": 0, "denied": 0}},
        "isolation": {"namespaces": ["mount", "pid", "net", "ipc", "uts", "cgroup"],
                      "seccomp": True, "landlock": True, "no_new_privs": True, "uid": 65534,
                      "gid": 65534, "cgroup": "v2"},
        "hash": "4fbb2ff48c9ba9e1c2ec5c6d8a4c1f3ab0b32b1aa8e0ba2dd1e93d1a2b3c4d5e",
        "caller": "uid:1000",
    }


def _cases():
    """(component, instance, should_be_valid, what) judged by the self-check."""
    r = _sample_receipt()
    in_session = dict(r, session_id="se-77aa01")
    no_caller = {k: v for k, v in r.items() if k != "caller"}
    no_hash = {k: v for k, v in r.items() if k != "hash"}
    return [
        ("Receipt", r, True, "a run's receipt"),
        ("Receipt", in_session, True, "an exec's receipt"),
        ("Receipt", no_caller, False, "receipt without caller"),
        ("Receipt", no_hash, False, "receipt without hash (the stored JSON lacks it)"),
        ("Receipt", dict(r, extra=1), False, "receipt with an unknown field"),
        ("Receipt", dict(r, exit={"code": 0, "signal": None}), False,
         "receipt.v1's own rules apply (exit.status missing)"),
        ("StreamEvent", {"type": "receipt", "receipt": r}, True, "receipt event"),
        ("StreamEvent", {"type": "stdout", "data": "x"}, True, "stdout event"),
        ("StreamEvent", {"type": "stderr", "data": ""}, True, "stderr event"),
        ("StreamEvent", {"type": "network", "decision": "deny", "host": "a.example",
                         "port": 443, "rule": None, "reason": "no_matching_rule"}, True,
         "network event, connection"),
        ("StreamEvent", {"type": "network", "decision": "allow", "host": "a.example",
                         "port": 80, "rule": "r1", "reason": "allowed", "method": "GET",
                         "path": "/", "status": 200}, True, "network event, request"),
        ("StreamEvent", {"type": "network", "decision": "fail", "host": "a.example",
                         "port": 443, "rule": "r1", "reason": "connect_refused"}, True,
         "network event, a failure of the network"),
        ("StreamEvent", {"type": "network", "decision": "deny", "host": "a.example",
                         "rule": "", "reason": "no_matching_rule"}, False,
         "network event without port, empty rule"),
        ("StreamEvent", {"type": "error", "error": "audit store failed", "reason": "internal"},
         True, "error event"),
        ("StreamEvent", {"type": "stdout", "data": 1}, False, "stdout data not a string"),
        ("StreamEvent", {"type": "progress"}, False, "unknown event type"),
        ("Error", {"error": "x", "reason": "invalid_json", "detail": "line 1, column 2: y"},
         True, "error with detail"),
        ("Error", {"error": "x", "reason": "teapot"}, False, "error with unknown reason"),
        ("Error", {"error": "x"}, False, "error without reason"),
        ("Error", {"error": "x", "reason": "conflict", "status": 409}, False,
         "error with an extra field"),
        ("Health", {"status": "ok", "version": "0.1.0"}, True, "health"),
        ("Health", {"status": "draining", "version": "0.1.0"}, False,
         "health while draining (503 answers an Error)"),
        ("RunRequest", {"workflow": "w", "argv": ["true"]}, True, "minimal run"),
        ("RunRequest", {"workflow": "w", "argv": []}, False, "empty argv"),
        ("RunRequest", {"argv": ["true"]}, False, "run without workflow"),
        ("RunRequest", {"workflow": "w", "argv": ["x"], "files": {"/etc/passwd": ""}}, False,
         "file outside /work, /tmp, /output"),
        ("RunRequest", {"workflow": "w", "argv": ["x"], "files": {"/work/../etc/x": ""}},
         False, "file path with .."),
        ("RunRequest", {"workflow": "w", "argv": ["x"], "files": {"/work/a": "not base64!"}},
         False, "file content not base64"),
        ("RunRequest", {"workflow": "w", "argv": ["x"],
                        "limits": {"timeout": "30s", "memory": "512MiB", "pids": 8,
                                   "cpu_time": "1m30s", "disk": "1048576"}}, True,
         "limit overrides"),
        ("RunRequest", {"workflow": "w", "argv": ["x"], "limits": {"memory": 1048576}}, False,
         "size as a number (sizes and durations are strings)"),
        ("RunRequest", {"workflow": "w", "argv": ["x"], "limits": {"pids": "8"}}, False,
         "count as a string"),
        ("RunRequest", {"workflow": "w", "argv": ["x"], "limits": {"network": "proxy"}}, False,
         "unknown limit"),
        ("RunRequest", {"workflow": "w", "argv": ["x"], "limits": {"timeout": "0s"}}, False,
         "zero duration"),
        ("SessionRequest", {"workflow": "w", "idle_timeout": "5m", "ttl": "1h"}, True, "session"),
        ("ExecRequest", {"argv": ["ls"], "cwd": "/work/sub", "timeout": "10s"}, True, "exec"),
        ("ExecRequest", {"argv": ["ls"], "cwd": "/home"}, False, "cwd outside the sandbox dirs"),
        ("ExecRequest", {"argv": ["ls"], "cwd": "/work/.."}, False, "cwd with .."),
        ("Session", {"id": "se-1", "workflow": "w", "created_at": "2025-06-01T12:00:00Z",
                     "expires_at": "2025-06-01T13:00:00.000Z"}, True, "session answer"),
        ("Session", {"id": "se-1", "workflow": "w", "created_at": "2025-06-01 12:00:00",
                     "expires_at": "2025-06-01T13:00:00Z"}, False, "timestamp not RFC 3339 UTC"),
        ("FileWritten", {"path": "/work/a.py", "bytes": 3, "sha256": "0" * 64}, True, "file"),
        ("DirectoryListing", [{"name": "a", "type": "link", "bytes": 0}], True, "listing"),
        ("DirectoryListing", [{"name": "a", "type": "socket", "bytes": 0}], False,
         "listing with an unknown type"),
        ("SessionSummary", {"session_id": "se-1", "workflow": "w", "caller": "agent-a",
                            "execs": [], "artifacts": [],
                            "network": {"mode": "proxy", "allowed": 0, "denied": 0,
                                        "bytes_out": 0, "bytes_in": 0, "denials": []},
                            "ended_by": "ttl"}, False,
         "summary whose network lacks failed and failures"),
        ("SessionSummary", {"session_id": "se-1", "workflow": "w", "caller": "agent-a",
                            "execs": [], "artifacts": [],
                            "network": {"mode": "proxy", "allowed": 0, "denied": 0,
                                        "failed": 1, "bytes_out": 0, "bytes_in": 0,
                                        "denials": [],
                                        "failures": [{"host": "a.example", "port": 443,
                                                      "rule": "r", "reason": "dns_failed"}]},
                            "ended_by": "ttl", "created_at": "2025-06-01T12:00:00.000Z",
                            "ended_at": "2025-06-01T12:05:00.000Z", "hash": "a" * 64},
         True, "summary"),
        ("SessionSummary", {"session_id": "se-1", "workflow": "w", "caller": "agent-a",
                            "execs": [], "artifacts": [],
                            "network": {"mode": "proxy", "allowed": 0, "denied": 0,
                                        "failed": 1, "bytes_out": 0, "bytes_in": 0,
                                        "denials": [],
                                        "failures": [{"host": "a.example", "port": 443,
                                                      "rule": "r", "reason": "dns_failed"}]},
                            "ended_by": "crash"}, False, "summary with unknown ended_by"),
        ("ApprovalDecision", {"decision": "allow", "scope": "execution"}, True, "decision"),
        ("ApprovalDecision", {"decision": "maybe"}, False, "unknown decision"),
    ]


def self_check():
    passed, failed = 0, 0

    def report(ok, what):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print(f"FAIL: {what}")

    api = load_api()
    report(str(api.get("openapi", "")).startswith("3.1"), "openapi is 3.1.x")
    report(api.get("jsonSchemaDialect") == DIALECT, "jsonSchemaDialect is JSON Schema 2020-12")
    receipt = load_receipt()
    report(receipt.get("$schema") == DIALECT, "receipt.v1.schema.json is a 2020-12 schema")

    docs = {"": api, "receipt.v1.schema.json": receipt}
    for where, ref in _walk_refs(api):
        target, fragment = urldefrag(ref)
        try:
            _resolve_pointer(docs[target], fragment)
            ok = True
        except (KeyError, IndexError, ValueError):
            ok = False
        report(ok, f"{where}: $ref {ref} does not resolve")

    for name, schema in api["components"]["schemas"].items():
        try:
            Draft202012Validator.check_schema(schema)
            report(True, name)
        except jsonschema.SchemaError as e:
            report(False, f"components/schemas/{name} is not a valid 2020-12 schema: {e.message}")
        for i, ex in enumerate(schema.get("examples", [])):
            problems = errors(name, ex)
            report(not problems, f"components/schemas/{name}/examples/{i}: " + "; ".join(problems))

    for where, name, ex in _media_examples(api):
        problems = errors(name, ex)
        report(not problems, f"{where} ({name}): " + "; ".join(problems))

    # The Receipt component is receipt.v1 itself (plus `caller` required), so the two cannot
    # drift; receipt.v1 must keep the fields the API adds.
    mine = api["components"]["schemas"]["Receipt"]
    report(mine.get("$ref") == "receipt.v1.schema.json",
           "Receipt must be {$ref: receipt.v1.schema.json} with caller required")
    for field in ("caller", "session_id"):
        report(field in receipt["properties"], f"receipt.v1.schema.json lacks {field}")

    for name, instance, valid, what in _cases():
        problems = errors(name, instance)
        report(bool(problems) != valid,
               f"{name}: {what}: expected {'valid' if valid else 'invalid'}"
               + (f", got: {'; '.join(problems)}" if problems else ""))

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


# ---- command line ----------------------------------------------------------------------------

def _read(path):
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def _check_one(name, text):
    try:
        instance = json.loads(text)
    except json.JSONDecodeError as e:
        return [f"not JSON: {e}"]
    return errors(name, instance)


def main(argv):
    args = argv[1:]
    if not args:
        return self_check()
    if args == ["--list"]:
        print("\n".join(component_names()))
        return 0
    ndjson = args[0] == "--ndjson"
    if ndjson:
        args = args[1:]
    if len(args) != 2 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    name, path = args
    if name not in load_api()["components"]["schemas"]:
        print(f"check_api.py: no component '{name}' (have: {', '.join(component_names())})",
              file=sys.stderr)
        return 2
    try:
        text = _read(path)
    except OSError as e:
        print(f"check_api.py: {path}: {e.strerror}", file=sys.stderr)
        return 2
    problems = []
    if not ndjson:
        problems = _check_one(name, text)
    else:
        lines = [(n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
        if not lines:
            problems.append("empty stream")
        for n, line in lines:
            problems += [f"line {n}: {p}" for p in _check_one(name, line)]
        if name == "StreamEvent" and lines and not problems:
            types = [json.loads(line).get("type") for _, line in lines]
            if types[-1] not in ("receipt", "error"):
                problems.append(f"line {lines[-1][0]}: the last event is '{types[-1]}', "
                                "not 'receipt' or 'error' (the stream was cut off)")
            for (n, _), t in zip(lines[:-1], types[:-1]):
                if t in ("receipt", "error"):
                    problems.append(f"line {n}: a '{t}' event before the end of the stream")
    if problems:
        print(f"{path}: not a valid {name}:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
