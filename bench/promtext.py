# SPDX-License-Identifier: Apache-2.0
"""Reads a Prometheus /metrics endpoint (text format) as {'name{labels}': value}."""
import urllib.request


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
