# SPDX-License-Identifier: Apache-2.0
"""Copies what a Python service of keel needs to run into a root file system: the venv's
base interpreter (pyenv's, say) as /usr/local/bin/python3.X with its libpython in
/usr/lib/<multiarch> (where the dynamic loader looks without a cache; the interpreter's own
RUNPATH is its build's prefix) and its standard library (without tests, IDLE, tkinter, ensurepip and the
static library), the venv's installed distributions that the services require (their
Requires-Dist, transitively, markers evaluated, without extras) in
/usr/local/lib/python3.X/site-packages, and the services' own packages, installed editable
in the venv, under /opt/keel at their place in keel's tree (so their paths beside the source,
such as ingress/torctl/openflow_nfs.json, hold there too), found through keel.pth. A launcher
/usr/local/bin/<script> per console script of the services. No __pycache__: images.sh
compiles the tree afterwards.

usage: VENV/bin/python pyroot.py DEST TREE DIST...
  DEST  the root file system (created or added to)
  TREE  keel's tree the editable DISTs point into (the checkout make build ran in)
  DIST  keel-placer, keel-torctl

Prints the ELF files it copied, relative to DEST, for rootfs.py elf.
"""
import importlib.metadata as md
import os
import re
import shutil
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement

SKIP_STDLIB = re.compile(r"^(test|idlelib|tkinter|turtledemo|ensurepip|site-packages|config-[^/]*|"
                         r"lib2to3/tests|ctypes/test|distutils/tests|sqlite3/test|unittest/test|"
                         r"lib-dynload/(_tkinter|_test|xxlimited|_xxtestfuzz)[^/]*)(/|$)")


def key(name: str) -> str:
    """A distribution's name as pip compares names (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str]) -> list[md.Distribution]:
    """The installed distributions roots require, transitively (not roots themselves)."""
    seen: dict[str, md.Distribution] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if key(name) in seen:
            continue
        dist = md.distribution(name)
        seen[key(name)] = dist
        for r in dist.requires or []:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [d for k, d in sorted(seen.items()) if k not in {key(r) for r in roots}]


def is_elf(path: Path) -> bool:
    """Whether path is an ELF file (a program, a library or an extension module)."""
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def copy(src: Path, dst: Path, elves: list[str], dest: Path) -> None:
    """Copies src to dst (a symlink as a symlink), adding dst to elves if it is an ELF file."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        dst.symlink_to(os.readlink(src))
        return
    shutil.copy2(src, dst)
    if is_elf(dst):
        elves.append(str(dst.relative_to(dest)))


def copy_tree(src: Path, dst: Path, elves: list[str], dest: Path, skip: re.Pattern[str] | None = None) -> None:
    """Copies src's tree to dst without byte code, nor what skip matches (paths relative to src)."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not
                             (skip and skip.match(str(rel / d))))
        for f in sorted(filenames):
            if f.endswith(".pyc") or (skip and skip.match(str(rel / f))):
                continue
            copy(Path(dirpath, f), dst / rel / f, elves, dest)


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__.split("\n\n")[1])
    dest, tree, roots = Path(sys.argv[1]), Path(sys.argv[2]).resolve(), sys.argv[3:]
    elves: list[str] = []
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix)
    local = dest / "usr/local"

    copy(base / "bin" / ver, local / "bin" / ver, elves, dest)
    for alias in ("python3", "python"):
        (local / "bin" / alias).unlink(missing_ok=True)
        (local / "bin" / alias).symlink_to(ver)
    libpython, multiarch = sysconfig.get_config_vars("INSTSONAME", "MULTIARCH")
    if libpython and (base / "lib" / libpython).exists():
        copy(base / "lib" / libpython, dest / "usr/lib" / multiarch / libpython, elves, dest)
    copy_tree(base / "lib" / ver, local / "lib" / ver, elves, dest, SKIP_STDLIB)

    site = local / "lib" / ver / "site-packages"
    for dist in closure(roots):
        for f in dist.files or []:
            src = Path(dist.locate_file(f)).resolve()
            parts = Path(f).parts
            if ".." in parts or "__pycache__" in parts or f.suffix == ".pyc":
                continue
            copy(src, site / f, elves, dest)

    paths = []
    for root in roots:
        dist = md.distribution(root)
        for pkg in (dist.read_text("top_level.txt") or "").split():
            spec = __import__(pkg).__spec__
            src = Path(next(iter(spec.submodule_search_locations))).resolve()
            rel = src.relative_to(tree)
            copy_tree(src, dest / "opt/keel" / rel, elves, dest)
            paths.append(f"/opt/keel/{rel.parent}")
        for ep in dist.entry_points.select(group="console_scripts"):
            module, _, func = ep.value.partition(":")
            script = local / "bin" / ep.name
            script.write_text(f"#!/usr/local/bin/{ver}\nimport sys\nfrom {module} import {func}\n"
                              f"sys.exit({func}())\n")
            script.chmod(0o755)
    site.mkdir(parents=True, exist_ok=True)
    (site / "keel.pth").write_text("".join(p + "\n" for p in sorted(set(paths))))
    print("\n".join(sorted(elves)))


if __name__ == "__main__":
    main()
