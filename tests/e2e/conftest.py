# SPDX-License-Identifier: Apache-2.0
"""The end-to-end tests import tests/' helpers (keelenv, keelstack) as the other stack tests do."""
import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent.parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
