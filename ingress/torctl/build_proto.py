"""Generate keel_torctl/gen/ (Python gRPC stubs) from proto/keel/v1/{control,torctl}.proto.

Run at build time (`make build`); the generated code is not committed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from grpc_tools import protoc

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE.parents[1] / "proto"
OUT = HERE / "keel_torctl" / "gen"
PROTOS = ("control", "torctl")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "__init__.py").write_text('"""Generated gRPC stubs (build_proto.py); not committed."""\n')
    include = str(Path(protoc.__file__).resolve().parent / "_proto")
    rc = protoc.main(["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{include}",
                      f"--python_out={OUT}", f"--grpc_python_out={OUT}",
                      *(str(PROTO_ROOT / "keel" / "v1" / f"{p}.proto") for p in PROTOS)])
    if rc != 0:
        return rc
    gen = OUT / "keel" / "v1"
    for d in (OUT / "keel", gen):
        (d / "__init__.py").touch()
    # The stubs import each other as top-level keel.v1; make them package-relative.
    for f in gen.glob("*_pb2*.py"):
        f.write_text(re.sub(r"^from keel\.v1 import", "from . import", f.read_text(), flags=re.M))
    return 0


if __name__ == "__main__":
    sys.exit(main())
