"""Generate the Python modules of the northbound protos (run after editing a .proto).

`python -m northbound.protos` writes `northbound/proto/tsdn/v1/*_pb2*.py` with imports
rewritten to the package path (`northbound.proto.tsdn.v1`), so the generated code needs no
sys.path tricks. The generated files are committed; a test checks they match the protos.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent / "proto"
PACKAGE_DIR = PROTO_ROOT / "tsdn" / "v1"
_IMPORT = re.compile(r"^from tsdn\.v1 import ", re.MULTILINE)


def generate(out_root: Path) -> list[Path]:
    """Compile every proto of tsdn.v1 into `out_root/tsdn/v1/`; return the files written."""
    from grpc_tools import protoc  # build-time only

    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PACKAGE_DIR.glob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    status = protoc.main(["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out_root}",
                          f"--pyi_out={out_root}", f"--grpc_python_out={out_root}", *protos])
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status}")
    written = sorted((out_root / "tsdn" / "v1").glob("*_pb2*.py*"))
    for path in written:
        path.write_text(_IMPORT.sub("from northbound.proto.tsdn.v1 import ", path.read_text()))
    return written


def generated_text(out_root: Path | None = None) -> dict[str, str]:
    """Name -> content of freshly generated modules (in a temporary folder unless given)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = out_root or Path(tmp)
        return {p.name: p.read_text() for p in generate(root)}


def main() -> int:
    """Regenerate the committed modules in place."""
    for name, text in generated_text().items():
        (PACKAGE_DIR / name).write_text(text)
        print(f"wrote {PACKAGE_DIR / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
