"""Regenerate the gRPC/protobuf code in `xlacache/_proto` from `proto/` (a dev tool).

    python tools/protogen.py           # rewrite the generated files (make proto)
    python tools/protogen.py --check   # exit 1 if they are stale

The output depends only on the .proto files and the grpcio-tools version, so the
generated files are committed and a test (tests/server/test_config_auth.py) fails when
they no longer match their source.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "xlacache" / "_proto"
PROTOS = ("xlacache/v1/cache.proto",)

_INIT = '"""Generated from proto/ by `make proto` (tools/protogen.py); do not edit."""\n'


def generate() -> dict[str, str]:
    """Run protoc and return the generated files: path relative to OUT_DIR -> text."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *(str(PROTO_DIR / p) for p in PROTOS),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed: " + " ".join(args))
        files: dict[str, str] = {"__init__.py": _INIT}
        for path in sorted(Path(tmp).rglob("*.py*")):
            rel = path.relative_to(tmp).as_posix()
            # proto package xlacache/v1 lives at xlacache/_proto/v1 in the Python tree.
            out_rel = rel.removeprefix("xlacache/")
            text = path.read_text().replace(
                "from xlacache.v1 import", "from xlacache._proto.v1 import"
            )
            files[out_rel] = text
        for pkg in {str(Path(p).parent.as_posix()) for p in files if "/" in p}:
            files.setdefault(f"{pkg}/__init__.py", _INIT)
        return files


def stale_files(files: dict[str, str] | None = None) -> list[str]:
    """Generated files that differ from (or are missing in) OUT_DIR, plus extra ones."""
    files = generate() if files is None else files
    stale = [rel for rel, text in files.items() if _read(OUT_DIR / rel) != text]
    present = {
        p.relative_to(OUT_DIR).as_posix()
        for p in OUT_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    return sorted(stale + sorted(present - set(files)))


def write(files: dict[str, str]) -> None:
    for rel, text in files.items():
        target = OUT_DIR / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if generated code is stale")
    args = parser.parse_args(argv)
    files = generate()
    if args.check:
        stale = stale_files(files)
        for rel in stale:
            print(f"stale: xlacache/_proto/{rel}", file=sys.stderr)
        if stale:
            print("run: make proto (python tools/protogen.py)", file=sys.stderr)
        return 1 if stale else 0
    write(files)
    print(f"wrote {len(files)} files under {OUT_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
