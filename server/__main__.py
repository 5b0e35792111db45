"""``python -m server standalone``: one Talos node (what ``talos standalone`` runs)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import uvicorn

from server.app import create_asgi
from server.config import load_config


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (structured logs)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m server")
    commands = parser.add_subparsers(dest="command", required=True)
    standalone = commands.add_parser("standalone", help="one node on local storage (or --storage hdfs://...)")
    standalone.add_argument("--host")
    standalone.add_argument("--port", type=int)
    standalone.add_argument("--data-dir", help="local data directory (default ./talos-data)")
    standalone.add_argument("--storage", help="file:///path or hdfs://host:port/path (instead of --data-dir)")
    standalone.add_argument("--config", help="TOML file ([server] table); env TALOS_CONFIG")
    standalone.add_argument("--group-commit", choices=["on", "off"])
    standalone.add_argument("--log-format", choices=["json", "text"], default="json")
    args = parser.parse_args(argv)

    storage = args.storage or args.data_dir
    group_commit = None if args.group_commit is None else args.group_commit == "on"
    try:
        config = load_config(args.config, host=args.host, port=args.port, storage=storage, group_commit=group_commit)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    handler = logging.StreamHandler(sys.stderr)
    if args.log_format == "json":
        handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=config.log_level.upper(), handlers=[handler], force=True)
    print(
        f"talos standalone on http://{config.host}:{config.port} (storage {config.storage}; docs at /docs)",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        create_asgi(config),
        host=config.host,
        port=config.port,
        loop="uvloop",
        http="httptools",
        log_config=None,
        access_log=config.access_log,
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    main()
