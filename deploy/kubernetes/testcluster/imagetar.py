# SPDX-License-Identifier: Apache-2.0
"""Writes a directory as a one-layer container image tarball that both `ctr images import`
(containerd) and `docker load` read: the layer and the config as blobs/sha256/<digest>, the
Docker archive's manifest.json beside an OCI image layout (oci-layout, index.json and the
OCI manifest), as `docker save` writes them since Docker 25.

usage: python3 imagetar.py DIR OUT.tar --ref NAME:TAG [--entrypoint JSON] [--env K=V]...
                           [--workdir DIR] [--label K=V]... [--epoch SECONDS]

The layer holds DIR's files in name order, owned by root (numeric ids), every mtime set to
--epoch (default $SOURCE_DATE_EPOCH, else 0), hard links kept: the same tree gives the same
layer digest. Prints the image's config digest (its image id) and the layer's size.
"""
import argparse
import datetime
import hashlib
import io
import json
import os
import stat
import sys
import tarfile


def layer(root: str, out: io.BufferedWriter, epoch: int) -> None:
    """Writes root's tree as an uncompressed tar, deterministically."""
    links: dict[tuple[int, int], str] = {}
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        def add(path: str, name: str) -> None:
            st = os.lstat(path)
            info = tarfile.TarInfo(name)
            info.mode = stat.S_IMODE(st.st_mode)
            info.mtime = epoch
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISLNK(st.st_mode):
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(path)
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if st.st_nlink > 1 and key in links:
                    info.type = tarfile.LNKTYPE
                    info.linkname = links[key]
                    tar.addfile(info)
                    return
                links[key] = name
                info.size = st.st_size
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                sys.exit(f"imagetar.py: {path}: neither file, directory nor symlink")

        def walk(path: str, name: str) -> None:
            for entry in sorted(os.listdir(path)):
                p, n = os.path.join(path, entry), f"{name}{entry}"
                add(p, n)
                if os.path.isdir(p) and not os.path.islink(p):
                    walk(p, n + "/")

        walk(root, "")


def blob(tar: tarfile.TarFile, data: bytes, epoch: int) -> str:
    """Adds data as blobs/sha256/<digest>; returns the digest."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo("blobs/sha256/" + digest[7:])
    info.size, info.mtime, info.mode = len(data), epoch, 0o444
    tar.addfile(info, io.BytesIO(data))
    return digest


def normalized(name: str) -> str:
    """name as containerd and the kubelet spell it: keel/agent is docker.io/keel/agent."""
    first = name.split("/")[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        return name
    return "docker.io/" + (name if "/" in name else "library/" + name)


def dumps(obj: object) -> bytes:
    """obj as canonical JSON: the same object gives the same bytes, hence the same digest."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main() -> None:
    ap = argparse.ArgumentParser(prog="imagetar.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument("--ref", required=True, help="NAME:TAG, e.g. keel/gateway:latest")
    ap.add_argument("--entrypoint", type=json.loads, help='JSON list, e.g. ["/usr/bin/keel-gateway"]')
    ap.add_argument("--env", action="append", default=[], metavar="K=V")
    ap.add_argument("--workdir")
    ap.add_argument("--label", action="append", default=[], metavar="K=V")
    ap.add_argument("--epoch", type=int, default=int(os.environ.get("SOURCE_DATE_EPOCH", "0")))
    a = ap.parse_args()
    name, _, tag = a.ref.rpartition(":")
    if not name or "/" in tag:
        sys.exit(f"imagetar.py: --ref {a.ref}: want NAME:TAG")

    layer_path = a.out + ".layer"
    with open(layer_path, "wb") as f:
        layer(a.dir, f, a.epoch)
    h = hashlib.sha256()
    with open(layer_path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    layer_digest, layer_size = "sha256:" + h.hexdigest(), os.path.getsize(layer_path)

    config: dict[str, object] = {"Env": a.env}
    if a.entrypoint is not None:
        config["Entrypoint"] = a.entrypoint
    if a.workdir:
        config["WorkingDir"] = a.workdir
    if a.label:
        config["Labels"] = dict(kv.split("=", 1) for kv in a.label)
    created = datetime.datetime.fromtimestamp(a.epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    image_config = dumps({
        "architecture": "amd64", "os": "linux", "created": created, "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": created, "created_by": "deploy/kubernetes/testcluster/images.sh"}],
    })

    tmp = a.out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, a.epoch
            tar.addfile(info)
        info = tarfile.TarInfo("blobs/sha256/" + layer_digest[7:])
        info.size, info.mtime, info.mode = layer_size, a.epoch, 0o444
        with open(layer_path, "rb") as f:
            tar.addfile(info, f)
        config_digest = blob(tar, image_config, a.epoch)
        manifest = dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": len(image_config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_digest, "size": layer_size}],
        })
        manifest_digest = blob(tar, manifest, a.epoch)
        index = dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "digest": manifest_digest, "size": len(manifest),
                           "platform": {"architecture": "amd64", "os": "linux"},
                           "annotations": {"io.containerd.image.name": f"{normalized(name)}:{tag}",
                                           "org.opencontainers.image.ref.name": tag}}],
        })
        docker = dumps([{"Config": "blobs/sha256/" + config_digest[7:], "RepoTags": [a.ref],
                         "Layers": ["blobs/sha256/" + layer_digest[7:]]}])
        for fname, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index),
                            ("manifest.json", docker)):
            info = tarfile.TarInfo(fname)
            info.size, info.mtime, info.mode = len(data), a.epoch, 0o444
            tar.addfile(info, io.BytesIO(data))
    os.remove(layer_path)
    os.replace(tmp, a.out)
    print(f"{config_digest} {layer_size}")


if __name__ == "__main__":
    main()
