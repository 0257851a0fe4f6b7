"""Generate a Python package's gRPC stubs from proto/keel/v1, into OUT (e.g. keel_placer/gen),
with the stubs importing each other package-relatively (from . import x_pb2), so that the
package works wherever it is installed. The control-plane token's helpers
(proto/keel/v1/controltoken.py) are copied beside them.

    python proto/genpy.py OUT PROTO [PROTO ...]     e.g. placer/keel_placer/gen placer

Run at build time (`make build`); the generated code is not committed.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, protos = Path(argv[0]), argv[1:]
    out.mkdir(parents=True, exist_ok=True)
    (out / "__init__.py").write_text('"""Generated gRPC stubs (proto/genpy.py); not committed."""\n')
    include = str(Path(protoc.__file__).resolve().parent / "_proto")
    rc = protoc.main(["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{include}",
                      f"--python_out={out}", f"--grpc_python_out={out}",
                      *(str(PROTO_ROOT / "keel" / "v1" / f"{p}.proto") for p in protos)])
    if rc != 0:
        return rc
    gen = out / "keel" / "v1"
    for d in (out / "keel", gen):
        (d / "__init__.py").touch()
    # protoc writes imports of the top-level package keel.v1; make them package-relative.
    for f in gen.glob("*_pb2*.py"):
        f.write_text(re.sub(r"^from keel\.v1 import", "from . import", f.read_text(), flags=re.M))
    shutil.copyfile(PROTO_ROOT / "keel" / "v1" / "controltoken.py", gen / "controltoken.py")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
