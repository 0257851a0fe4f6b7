# SPDX-License-Identifier: Apache-2.0
"""Where the tests find keel's binaries: $KEEL_BIN, else build/bin."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("KEEL_BIN", ROOT / "build" / "bin"))
