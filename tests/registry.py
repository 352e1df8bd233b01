"""A stand-in Confluent Schema Registry for tests: the REST subset enrichd's client uses.

No Schema Registry can be installed on the test machines (its releases are Java artifacts
outside the package registries), so this serves the endpoints over real HTTP on loopback
for the real confluent-kafka client: register a schema under a subject, fetch a subject's
latest version, fetch a schema by id. Ids are global and a re-registered identical schema
keeps its id, as the real registry does.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse


class Registry:
    """The registry's data: schemas by id, versions by subject."""

    def __init__(self) -> None:
        self.schemas: list[str] = []
        self.subjects: dict[str, list[int]] = {}
        self.lock = threading.Lock()

    def register(self, subject: str, schema: str) -> int:
        with self.lock:
            if schema not in self.schemas:
                self.schemas.append(schema)
            schema_id = self.schemas.index(schema) + 1
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id


class _Handler(BaseHTTPRequestHandler):
    registry: Registry

    def log_message(self, *args: Any) -> None:  # quiet test output
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _parts(self) -> list[str]:
        return [unquote(p) for p in urlparse(self.path).path.strip("/").split("/")]

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        parts = self._parts()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            self._send(200, {"id": self.registry.register(parts[1], body["schema"])})
        else:
            self._send(404, {"error_code": 404, "message": f"not served: {self.path}"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        parts = self._parts()
        registry = self.registry
        if len(parts) == 3 and parts[:2] == ["schemas", "ids"]:
            schema_id = int(parts[2])
            if 0 < schema_id <= len(registry.schemas):
                self._send(200, {"schema": registry.schemas[schema_id - 1]})
                return
            self._send(404, {"error_code": 40403, "message": "Schema not found"})
        elif len(parts) == 4 and parts[0] == "subjects" and parts[2:] == ["versions", "latest"]:
            versions = registry.subjects.get(parts[1])
            if not versions:
                self._send(404, {"error_code": 40401, "message": "Subject not found"})
                return
            schema_id = versions[-1]
            self._send(
                200,
                {
                    "subject": parts[1],
                    "version": len(versions),
                    "id": schema_id,
                    "schema": registry.schemas[schema_id - 1],
                },
            )
        else:
            self._send(404, {"error_code": 404, "message": f"not served: {self.path}"})


class RegistryServer:
    """The stand-in on a free loopback port, in a background thread."""

    def __init__(self) -> None:
        self.registry = Registry()
        handler = type("Handler", (_Handler,), {"registry": self.registry})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> RegistryServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
