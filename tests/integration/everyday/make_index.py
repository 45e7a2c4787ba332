"""Writes a PEP 503 "simple" package index holding one hand-made wheel, for the everyday battery.

Usage: make_index.py ROOT NAME VERSION

ROOT/simple/index.html lists NAME; ROOT/simple/NAME/index.html links the wheel
ROOT/packages/NAME-VERSION-py3-none-any.whl (with its sha256 in the fragment, as real indexes
give it). The wheel is a plain zip: the module NAME/__init__.py (`__version__ = VERSION`,
`greet()`), and the .dist-info files pip reads (METADATA, WHEEL, RECORD with each file's hash).
Nothing is built with setuptools, so installing it needs no build backend from the index.
"""
import base64
import hashlib
import os
import sys
import zipfile


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def wheel_files(name: str, version: str) -> dict:
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": (
            f'__version__ = "{version}"\n\n\ndef greet():\n'
            f'    return "hello from {name} {version}"\n'
        ),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            "Summary: a package served by the everyday battery's local index\n"
        ),
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: sluice-test\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ),
    }
    record = "".join(
        f"{path},{record_hash(text.encode())},{len(text.encode())}\n" for path, text in files.items()
    )
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    return files


def main() -> None:
    root, name, version = sys.argv[1], sys.argv[2], sys.argv[3]
    wheel = f"{name}-{version}-py3-none-any.whl"
    os.makedirs(os.path.join(root, "packages"), exist_ok=True)
    os.makedirs(os.path.join(root, "simple", name), exist_ok=True)
    wheel_path = os.path.join(root, "packages", wheel)
    with zipfile.ZipFile(wheel_path, "w", zipfile.ZIP_DEFLATED) as z:
        for path, text in wheel_files(name, version).items():
            z.writestr(path, text)
    with open(wheel_path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(root, "simple", "index.html"), "w") as f:
        f.write(f'<!DOCTYPE html><html><body><a href="{name}/">{name}</a></body></html>\n')
    with open(os.path.join(root, "simple", name, "index.html"), "w") as f:
        f.write(
            "<!DOCTYPE html><html><body>"
            f'<a href="../../packages/{wheel}#sha256={sha}">{wheel}</a>'
            "</body></html>\n"
        )


if __name__ == "__main__":
    main()
