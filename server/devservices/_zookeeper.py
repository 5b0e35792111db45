"""A real ZooKeeper 3.8 (Debian package ``zookeeper``) on a loopback port."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from server.devservices._process import ManagedProcess, ServiceError, free_port, in_netns, wait_until

__all__ = ["ZooKeeperServer"]

_ZK_JAR = Path("/usr/share/java/zookeeper.jar")
_SLF4J_JAR = Path("/usr/share/java/slf4j-simple.jar")


def four_letter(host: str, port: int, command: str, timeout: float = 2.0) -> str:
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(command.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    """Standalone ZooKeeper with its data under ``base_dir``. Ready when ``srvr`` answers.

    ``host``: the address it listens on; ``netns``: a network namespace to run it in (``ip netns``)."""

    def __init__(
        self,
        base_dir: Path,
        *,
        port: int | None = None,
        tick_ms: int = 500,
        max_session_ms: int = 60_000,
        host: str = "127.0.0.1",
        netns: str | None = None,
    ) -> None:
        self.base_dir = base_dir
        self.host = host
        self.netns = netns
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.max_session_ms = max_session_ms
        self.process: ManagedProcess | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        if not _ZK_JAR.exists():
            raise ServiceError("ZooKeeper is not installed: apt-get install zookeeper")
        java = shutil.which("java")
        if java is None:
            raise ServiceError("java not found: apt-get install default-jre-headless")
        data = self.base_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.base_dir / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_ms}\ndataDir={data}\nclientPort={self.port}\n"
            f"clientPortAddress={self.host}\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=srvr,ruok,mntr,stat\n"
            f"minSessionTimeout={2 * self.tick_ms}\nmaxSessionTimeout={self.max_session_ms}\n"
        )
        self.process = ManagedProcess(
            "zookeeper",
            in_netns(
                self.netns,
                [
                    java,
                    "-Xmx256m",
                    "-cp",
                    f"{_ZK_JAR}:{_SLF4J_JAR}",
                    "org.apache.zookeeper.server.ZooKeeperServerMain",
                    str(config),
                ],
            ),
            log_path=self.base_dir / "zookeeper.log",
        )
        self.process.start()

        def ready() -> bool:
            assert self.process is not None
            self.process.check_alive()
            return "Zookeeper version" in four_letter(self.host, self.port, "srvr")

        try:
            wait_until(ready, timeout=timeout, what=f"ZooKeeper on {self.address}")
        except ServiceError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process = None
