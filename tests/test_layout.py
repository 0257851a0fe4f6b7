# SPDX-License-Identifier: Apache-2.0
"""What the repository tells a new user, checked against the files (issue 18 items 5 and 9):
faas-cli's build contexts stay out of CMake's build/, chains name keel's chain runtime, and
the README says how to scale without a faas-cli scale command. Reads files only."""
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def functions(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["functions"]


def test_faas_cli_builds_packet_functions_in_functions_not_in_cmakes_build_dir():
    # faas-cli build writes ./build/<function>/ of the folder it runs in: at the root that is
    # CMake's build/. The root stack.yml deploys packet functions; functions/stack.yml builds them.
    root = functions(ROOT / "stack.yml")
    packet = {n: f for n, f in root.items() if f.get("labels", {}).get("com.keel.kind") == "nf"}
    assert packet and all("lang" not in f and "handler" not in f for f in packet.values()), packet
    built = functions(ROOT / "functions" / "stack.yml")
    for name, f in packet.items():
        assert built[name]["image"] == f["image"]
        assert built[name]["lang"] == "packet-cpp"
        assert (ROOT / "functions" / built[name]["handler"] / "handler.cc").is_file()
    assert (ROOT / "functions" / "template" / "packet-cpp" / "template.yml").is_file()
    assert not (ROOT / "template").exists(), "a root template/ invites faas-cli build at the root"


def test_chains_name_the_chain_runtime_image():
    for name, f in functions(ROOT / "stack.yml").items():
        if f.get("labels", {}).get("com.keel.kind") == "chain":
            assert f["image"].split(":")[0] == "keel/chain", name


def test_readme_says_how_to_build_and_scale_as_the_code_does():
    readme = (ROOT / "README.md").read_text()
    assert "cd functions && DOCKER_BUILDKIT=0 faas-cli build -f stack.yml" in readme
    assert "faas-cli build -f stack.yml --filter ttlguard" not in readme
    assert "has no `scale` command" in readme and "/system/scale-function/" in readme
    assert "`image: keel/chain:latest`" in readme
    assert "Until the gateway lands" not in readme
    for part in ("gateway/", "coopsched/", "proto/", "deploy/local/", "internal/"):
        assert f"\n    {part}" in readme, part
    topology = (ROOT / "deploy" / "local" / "topology.yaml").read_text()
    assert "until workers register" not in topology
