"""A real single-DataNode HDFS 2.7.3 (native RPC and WebHDFS) on loopback ports."""

from __future__ import annotations

import json
import shutil
import socket
import urllib.request
from pathlib import Path

from server.devservices._hadoop import ensure_hadoop
from server.devservices._process import ManagedProcess, ServiceError, free_port, in_netns, wait_until

__all__ = ["HdfsCluster"]

_LOG4J = """log4j.rootLogger=INFO,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
"""


def _site(properties: dict[str, str]) -> str:
    body = "".join(
        f"  <property><name>{key}</name><value>{value}</value></property>\n" for key, value in properties.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


class HdfsCluster:
    """NameNode + one DataNode with their state under ``base_dir``.

    ``host``: the address both listen on, and the one the NameNode tells clients to reach the DataNode at;
    ``netns``: a network namespace to run them in (``ip netns``)."""

    def __init__(
        self,
        base_dir: Path,
        *,
        rpc_port: int | None = None,
        http_port: int | None = None,
        host: str = "127.0.0.1",
        netns: str | None = None,
    ) -> None:
        self.base_dir = base_dir
        self.host = host
        self.netns = netns
        self.rpc_port = rpc_port or free_port()
        self.http_port = http_port or free_port()
        self.datanode_port = free_port()
        self.datanode_http_port = free_port()
        self.namenode: ManagedProcess | None = None
        self.datanode: ManagedProcess | None = None

    @property
    def url(self) -> str:
        """``hdfs://`` URL of the NameNode (native RPC)."""
        return f"hdfs://{self.host}:{self.rpc_port}"

    @property
    def webhdfs_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    def _write_config(self) -> Path:
        conf = self.base_dir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "core-site.xml").write_text(_site({"fs.defaultFS": self.url}))
        (conf / "hdfs-site.xml").write_text(
            _site(
                {
                    "dfs.namenode.name.dir": str(self.base_dir / "name"),
                    "dfs.datanode.data.dir": str(self.base_dir / "data"),
                    "dfs.replication": "1",
                    "dfs.permissions.enabled": "false",
                    "dfs.webhdfs.enabled": "true",
                    "dfs.namenode.rpc-address": f"{self.host}:{self.rpc_port}",
                    "dfs.namenode.http-address": f"{self.host}:{self.http_port}",
                    "dfs.datanode.http.address": f"{self.host}:{self.datanode_http_port}",
                    "dfs.datanode.address": f"{self.host}:{self.datanode_port}",
                    "dfs.datanode.ipc.address": f"{self.host}:0",
                    "dfs.datanode.hostname": self.host,
                    "dfs.namenode.secondary.http-address": f"{self.host}:0",
                    # An address no resolver knows (a private one in a namespace) is a valid DataNode.
                    "dfs.namenode.datanode.registration.ip-hostname-check": "false",
                    "dfs.namenode.safemode.extension": "0",
                    "dfs.heartbeat.interval": "1",
                    "dfs.namenode.heartbeat.recheck-interval": "5000",
                    # A single DataNode: never try to replace it in a failing write pipeline.
                    "dfs.client.block.write.replace-datanode-on-failure.enable": "false",
                }
            )
        )
        (conf / "log4j.properties").write_text(_LOG4J)
        return conf

    def _java(self, name: str, main: str, home: Path, conf: Path) -> ManagedProcess:
        java = shutil.which("java")
        if java is None:
            raise ServiceError("java not found: apt-get install default-jre-headless")
        classpath = f"{conf}:{home / 'web'}:{home / 'jars'}/*"
        argv = in_netns(self.netns, [java, "-Xmx256m", "-cp", classpath, main])
        return ManagedProcess(name, argv, log_path=self.base_dir / f"{name}.log")

    def live_datanodes(self) -> int:
        query = f"{self.webhdfs_url}/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState"
        with urllib.request.urlopen(query, timeout=2) as response:
            beans = json.load(response)["beans"]
        return int(beans[0]["NumLiveDataNodes"]) if beans else 0

    def start(self, timeout: float = 90.0) -> None:
        home = ensure_hadoop()
        conf = self._write_config()
        formatted = self.base_dir / "name" / "current" / "VERSION"
        if not formatted.exists():
            fmt = self._java("format", "org.apache.hadoop.hdfs.server.namenode.NameNode", home, conf)
            fmt.argv += ["-format", "-force", "-nonInteractive"]
            fmt.start()
            assert fmt.process is not None
            if fmt.process.wait(timeout) != 0:
                raise ServiceError(f"namenode -format failed:\n{fmt.tail()}")
        self.namenode = self._java("namenode", "org.apache.hadoop.hdfs.server.namenode.NameNode", home, conf)
        self.namenode.start()
        self.start_datanode()
        try:
            self.wait_ready(timeout)
        except ServiceError:
            self.stop()
            raise

    def start_datanode(self) -> None:
        home = ensure_hadoop()
        self.datanode = self._java(
            "datanode", "org.apache.hadoop.hdfs.server.datanode.DataNode", home, self.base_dir / "conf"
        )
        self.datanode.start()

    def wait_ready(self, timeout: float = 90.0) -> None:
        def ready() -> bool:
            for process in (self.namenode, self.datanode):
                if process is None:
                    raise ServiceError("HDFS is not started")
                process.check_alive()
            # After a DataNode restart the NameNode still counts the old registration as live for a
            # while: the new DataNode must also be accepting block transfers.
            with socket.create_connection((self.host, self.datanode_port), timeout=1):
                pass
            return self.live_datanodes() >= 1

        wait_until(ready, timeout=timeout, what=f"HDFS at {self.url} with a live DataNode", interval=0.25)

    def stop_datanode(self) -> None:
        if self.datanode is not None:
            self.datanode.stop()
            self.datanode = None

    def stop(self) -> None:
        self.stop_datanode()
        if self.namenode is not None:
            self.namenode.stop()
            self.namenode = None
