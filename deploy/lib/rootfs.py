# SPDX-License-Identifier: Apache-2.0
"""Lists the host files an image's root file system is made of (rootfs.sh's rootfs_list,
for deploy/local/images.sh and deploy/kubernetes/testcluster/images.sh).

usage: python3 rootfs.py elf FILE...   the files, the shared libraries they need (ldd) and
                                       the dynamic loader
       python3 rootfs.py deb PKG...    the files of the Debian packages and of everything
                                       they depend on (Depends, Pre-Depends; the first
                                       installed alternative), without docs

Prints one path a line, relative to /, sorted and canonical (/lib/x becomes /usr/lib/x on
merged-/usr systems), each symlink followed by every link of its chain.
"""
import os
import re
import subprocess
import sys

out: set[str] = set()


def add(path: str) -> None:
    """Adds path (a file or symlink) and, for a symlink, every link of its chain."""
    while True:
        path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if path in out or not os.path.lexists(path):
            return
        if os.path.isdir(path) and not os.path.islink(path):
            return
        out.add(path)
        if not os.path.islink(path):
            return
        path = os.path.join(os.path.dirname(path), os.readlink(path))


def elf(files: list[str]) -> None:
    """Adds the files and the shared libraries ldd finds for them; exits naming any that
    ldd cannot find."""
    missing = []
    for f in files:
        add(f)
        r = subprocess.run(["ldd", f], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            line = line.strip()
            if "=> not found" in line:
                missing.append(f"{f}: {line.split()[0]}")
            m = re.match(r"(?:\S+ => )?(/\S+) \(0x", line)
            if m:
                add(m.group(1))
    if missing:
        sys.exit("images.sh: shared libraries not found:\n  " + "\n  ".join(missing))


def deb(roots: list[str]) -> None:
    """Adds the files of the installed Debian packages roots and of their dependencies."""
    q = subprocess.run(["dpkg-query", "-W", "-f=${binary:Package}\t${db:Status-Status}\t${Provides}\t"
                        "${Pre-Depends}, ${Depends}\n"], capture_output=True, text=True, check=True).stdout
    installed, provided = {}, {}
    for line in q.splitlines():
        pkg, status, provides, deps = line.split("\t")
        if status != "installed":
            continue
        name = pkg.split(":")[0]
        installed[name] = (pkg, deps)
        for p in provides.split(","):
            p = re.sub(r"\(.*?\)", "", p).strip().split(":")[0]
            if p:
                provided.setdefault(p, name)

    def pick(alternatives: str) -> str | None:
        for a in alternatives.split("|"):
            a = re.sub(r"\(.*?\)|\[.*?\]|<.*?>", "", a).strip().split(":")[0]
            if a in installed:
                return a
            if a in provided:
                return provided[a]
        return None

    absent = [r for r in roots if r not in installed]
    if absent:
        sys.exit("images.sh: Debian packages not installed here: " + " ".join(absent) + " (make deps)")
    todo, seen = list(roots), set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for d in installed[p][1].split(","):
            if d.strip() and (r := pick(d)) and r not in seen:
                todo.append(r)
    skip = re.compile(r"^/usr/share/(doc|doc-base|man|info|locale|lintian|bug|bash-completion)/")
    for p in sorted(seen):
        files = subprocess.run(["dpkg-query", "-L", installed[p][0]], capture_output=True, text=True, check=True)
        for f in files.stdout.splitlines():
            if f.startswith("/") and not skip.match(f):
                add(f)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("elf", "deb"):
        sys.exit(__doc__.split("\n\n")[1])
    {"elf": elf, "deb": deb}[sys.argv[1]](sys.argv[2:])
    print("\n".join(p.lstrip("/") for p in sorted(out)))
