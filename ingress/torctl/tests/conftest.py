# SPDX-License-Identifier: Apache-2.0
"""The fixtures of torctl_env (a module of its own name: placer/tests has a conftest too)."""
from torctl_env import bridge, gateway, ovs, torctl  # noqa: F401 - pytest fixtures
