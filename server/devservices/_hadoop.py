"""Fetch the Apache Hadoop 2.7.3 server jars once, from the PyPI sdist ``pyspark==2.4.8``.

No Hadoop distribution is reachable from these machines, but that sdist carries the HDFS server jars.
They are cached outside the repository (``$TALOS_CACHE_DIR`` or ``~/.cache/talos``); WebHDFS needs
Jersey 1 from Debian (``libjersey1-*-java``), copied beside them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from server.devservices._process import ServiceError

__all__ = ["HADOOP_VERSION", "cache_dir", "ensure_hadoop"]

HADOOP_VERSION = "2.7.3"

_SDIST_JARS = [
    "commons-cli-1.2",
    "commons-codec-1.10",
    "commons-collections-3.2.2",
    "commons-configuration-1.6",
    "commons-io-2.4",
    "commons-lang-2.6",
    "commons-logging-1.1.3",
    "commons-math3-3.4.1",
    "guava-14.0.1",
    "hadoop-annotations-2.7.3",
    "hadoop-auth-2.7.3",
    "hadoop-common-2.7.3",
    "hadoop-hdfs-2.7.3",
    "htrace-core-3.1.0-incubating",
    "httpclient-4.5.6",
    "httpcore-4.4.10",
    "jackson-core-asl-1.9.13",
    "jackson-mapper-asl-1.9.13",
    "javax.servlet-api-3.1.0",
    "jaxb-api-2.2.2",
    "jetty-6.1.26",
    "jetty-util-6.1.26",
    "leveldbjni-all-1.8",
    "log4j-1.2.17",
    "netty-3.9.9.Final",
    "netty-all-4.1.47.Final",
    "protobuf-java-2.5.0",
    "slf4j-api-1.7.16",
    "slf4j-log4j12-1.7.16",
    "xercesImpl-2.9.1",
    "xmlenc-0.52",
]
# Jersey 1.19 for WebHDFS. Not javax.ws.rs-api-2.x: JAX-RS 2 breaks Jersey 1 (AbstractMethodError).
_DEBIAN_JARS = ["jersey1-core.jar", "jersey1-server.jar", "jersey1-servlet.jar", "jsr311-api-1.1.1.jar"]
_DEBIAN_PACKAGES = ["libjersey1-core-java", "libjersey1-server-java", "libjersey1-servlet-java"]


def cache_dir() -> Path:
    root = os.environ.get("TALOS_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "talos"


def _log(message: str) -> None:
    print(f"[talos hadoop] {message}", file=sys.stderr, flush=True)


def _download_sdist(into: Path) -> Path:
    # pip prepares the sdist's metadata by running its setup.py, which calls pypandoc when importable:
    # a throw-away venv with only setuptools and wheel keeps that from happening.
    venv = into / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "setuptools<81", "wheel"], check=True)
    subprocess.run(
        [*pip, "download", "--no-deps", "--no-build-isolation", "pyspark==2.4.8", "-d", str(into)],
        check=True,
    )
    sdists = list(into.glob("pyspark-2.4.8.tar.gz"))
    if not sdists:
        raise ServiceError("pip did not produce pyspark-2.4.8.tar.gz")
    return sdists[0]


def _debian_jars() -> list[Path]:
    found = [Path("/usr/share/java") / name for name in _DEBIAN_JARS]
    if all(p.exists() for p in found):
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        _log("installing Jersey 1 for WebHDFS from Debian")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *_DEBIAN_PACKAGES],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
    missing = [p for p in found if not p.exists()]
    if missing:
        raise ServiceError(f"missing {', '.join(map(str, missing))}: apt-get install {' '.join(_DEBIAN_PACKAGES)}")
    return found


def ensure_hadoop() -> Path:
    """The Hadoop home (``jars/``, ``web/``), fetched and assembled on first use."""
    home = cache_dir() / f"hadoop-{HADOOP_VERSION}"
    done = home / ".complete"
    if done.exists():
        return home
    _log(f"assembling HDFS {HADOOP_VERSION} in {home} (one time, ~220 MB download)")
    staging = Path(tempfile.mkdtemp(prefix="hadoop-", dir=cache_dir() if cache_dir().exists() else None))
    try:
        jars = staging / "home" / "jars"
        jars.mkdir(parents=True)
        sdist = _download_sdist(staging)
        wanted = {f"pyspark-2.4.8/deps/jars/{name}.jar" for name in _SDIST_JARS}
        with tarfile.open(sdist, "r:gz") as archive:
            for member in archive:
                if member.name in wanted and member.isfile():
                    source = archive.extractfile(member)
                    assert source is not None
                    (jars / Path(member.name).name).write_bytes(source.read())
                    wanted.discard(member.name)
        if wanted:
            raise ServiceError(f"the sdist lacks {sorted(wanted)}")
        for jar in _debian_jars():
            shutil.copy(jar.resolve(), jars / jar.name)
        for app in ("hdfs", "datanode", "secondary"):
            (staging / "home" / "web" / "webapps" / app).mkdir(parents=True)
        if home.exists():
            shutil.rmtree(home)
        home.parent.mkdir(parents=True, exist_ok=True)
        (staging / "home").rename(home)
        done.write_text(HADOOP_VERSION + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _log("ready")
    return home
