"""A stand-in Confluent Schema Registry for tests: the REST subset enrichd's client uses.

No Schema Registry can be installed on the test machines (its releases are Java artifacts
outside the package registries), so this serves the endpoints over real HTTP on loopback
for the real confluent-kafka client: register a schema under a subject, look a schema up
under a subject, fetch a subject's latest version, fetch a schema by id, test a schema's
compatibility, set a subject's compatibility level. Ids are global and a re-registered
identical schema keeps its id, as the real registry does.

Compatibility is checked as the real registry's default, ``BACKWARD`` (the new schema reads
what the latest one wrote; ``NONE`` per subject switches it off), by resolution in fastavro:
records generated from the latest schema are written with it and read with the new one. That
finds what matters here (a field added without a default, a type changed), not every rule
of Avro's; a refusal answers 409 with the reason, as the real one does.

Like a registry behind basic auth (Confluent Cloud's, or one with an HTTP basic auth realm),
it answers 401 to a request without the right ``Authorization`` header and 403 to a known
user it is told to deny, and serves HTTPS when given a certificate. It records who asked
for what, so a test can tell the driver's requests (a subject's latest version) from the
executors' (a writer schema by id). Told to (:attr:`Registry.outage`), it answers every
request as a registry in trouble would, or what stands in front of it: a 429 or a 5xx with
the registry's JSON, or a 404 with a proxy's HTML page.
"""

from __future__ import annotations

import base64
import io
import json
import secrets
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse


class Registry:
    """The registry's data: schemas by id, versions by subject."""

    def __init__(self) -> None:
        self.schemas: list[str] = []
        self.subjects: dict[str, list[int]] = {}
        self.lock = threading.Lock()
        self.user = "enrichd"
        self.password = secrets.token_urlsafe(12)
        """The one password the registry takes; a test may change it while it runs."""
        self.denied: set[str] = set()
        """Users whose right password gets 403."""
        self.requests: list[tuple[str, str]] = []
        """(path, outcome) of every request: ``ok``, ``401`` or ``403``."""
        self.compatibility: dict[str, str] = {}
        """Compatibility level by subject; ``BACKWARD`` when not set."""
        self.outage: tuple[int, str] | None = None
        """``(status, "json" or "html")`` to answer every request with instead; None: serve."""

    def check(self, authorization: str | None) -> int:
        """200, 401 or 403 for a request with this ``Authorization`` header."""
        expected = f"{self.user}:{self.password}"
        given = ""
        if authorization and authorization.startswith("Basic "):
            given = base64.b64decode(authorization[6:]).decode("utf-8", "replace")
        user, _, password = given.partition(":")
        if user in self.denied and password == self.password:
            return 403
        return 200 if given == expected else 401

    def incompatibility(self, subject: str, schema: str) -> str | None:
        """Why ``schema`` may not be registered under ``subject``; None when it may."""
        import fastavro
        from fastavro.utils import generate_many

        versions = self.subjects.get(subject)
        if not versions or self.compatibility.get(subject, "BACKWARD") == "NONE":
            return None
        try:
            new = fastavro.parse_schema(json.loads(schema))
        except Exception as exc:  # noqa: BLE001 - any parse failure: an invalid schema
            return f"Invalid schema: {exc}"
        old = fastavro.parse_schema(json.loads(self.schemas[versions[-1] - 1]))
        for datum in generate_many(old, 3):
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, old, datum)
            buffer.seek(0)
            try:
                fastavro.schemaless_reader(buffer, old, new)
            except Exception as exc:  # noqa: BLE001 - SchemaResolutionError and kin
                return (
                    "Schema being registered is incompatible with an earlier schema for "
                    f'subject "{subject}", details: [READER_CANNOT_READ_WRITER: {exc}]'
                )
        return None

    def lookup(self, subject: str, schema: str) -> int | None:
        """The id of ``schema`` when registered under ``subject``."""
        with self.lock:
            if schema in self.schemas and self.schemas.index(schema) + 1 in self.subjects.get(
                subject, []
            ):
                return self.schemas.index(schema) + 1
            return None

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

    def _page(self, status: int) -> None:
        """An HTML page, as a proxy or load balancer answers for a registry it cannot reach."""
        data = f"<html><body><h1>{status}</h1><p>nginx</p></body></html>".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _allowed(self) -> bool:
        outage = self.registry.outage
        if outage is not None:
            with self.registry.lock:
                self.registry.requests.append((self.path, str(outage[0])))
            if outage[1] == "html":
                self._page(outage[0])
            else:
                self._send(outage[0], {"error_code": outage[0] * 100, "message": "unavailable"})
            return False
        status = self.registry.check(self.headers.get("Authorization"))
        with self.registry.lock:
            self.registry.requests.append((self.path, "ok" if status == 200 else str(status)))
        if status == 401:
            self._send(401, {"error_code": 401, "message": "Unauthorized"})
        elif status == 403:
            self._send(403, {"error_code": 40301, "message": "User is denied operation"})
        return status == 200

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        if not self._allowed():
            return
        parts = self._parts()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        registry = self.registry
        if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            if registry.lookup(parts[1], body["schema"]) is None:
                reason = registry.incompatibility(parts[1], body["schema"])
                if reason is not None:
                    status, code = (422, 42201) if reason.startswith("Invalid") else (409, 409)
                    self._send(status, {"error_code": code, "message": reason})
                    return
            self._send(200, {"id": registry.register(parts[1], body["schema"])})
        elif len(parts) == 2 and parts[0] == "subjects":
            found = registry.lookup(parts[1], body["schema"])
            if found is None:
                known = parts[1] in registry.subjects
                code, message = (
                    (40403, "Schema not found") if known else (40401, "Subject not found")
                )
                self._send(404, {"error_code": code, "message": message})
                return
            version = registry.subjects[parts[1]].index(found) + 1
            self._send(
                200,
                {"subject": parts[1], "id": found, "version": version, "schema": body["schema"]},
            )
        elif parts[:2] == ["compatibility", "subjects"] and parts[3:] == ["versions", "latest"]:
            if not registry.subjects.get(parts[2]):
                self._send(404, {"error_code": 40401, "message": "Subject not found"})
                return
            reason = registry.incompatibility(parts[2], body["schema"])
            answer: dict[str, Any] = {"is_compatible": reason is None}
            if reason is not None:
                answer["messages"] = [reason]
            self._send(200, answer)
        else:
            self._send(404, {"error_code": 404, "message": f"not served: {self.path}"})

    def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
        if not self._allowed():
            return
        parts = self._parts()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if len(parts) == 2 and parts[0] == "config":
            self.registry.compatibility[parts[1]] = body["compatibility"]
            self._send(200, {"compatibility": body["compatibility"]})
        else:
            self._send(404, {"error_code": 404, "message": f"not served: {self.path}"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if not self._allowed():
            return
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
    """The stand-in on a free loopback port, in a background thread; HTTPS with ``tls``."""

    def __init__(self, tls: tuple[Path, Path] | None = None) -> None:
        self.registry = Registry()
        handler = type("Handler", (_Handler,), {"registry": self.registry})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(certfile=str(tls[0]), keyfile=str(tls[1]))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    @property
    def user_info(self) -> str:
        """``user:password`` as ``basic.auth.user.info`` takes it."""
        return f"{self.registry.user}:{self.registry.password}"

    def add(self, subject: str, schema: str) -> int:
        """Register ``schema`` under ``subject`` as a producer would; its id."""
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        client = SchemaRegistryClient(self.client_settings())
        return int(client.register_schema(subject, Schema(schema, "AVRO")))

    def client_settings(self, **extra: Any) -> dict[str, Any]:
        """Settings of a ``SchemaRegistryClient`` that the registry lets in."""
        return {"url": self.url, "basic.auth.user.info": self.user_info, **extra}

    def asked_by_id(self) -> set[tuple[int, str]]:
        """(schema id, outcome) of the requests for a schema by id: readers of records ask."""
        with self.registry.lock:
            return {
                (int(urlparse(path).path.rstrip("/").rpartition("/")[2]), outcome)
                for path, outcome in self.registry.requests
                if "/schemas/ids/" in path
            }

    def __enter__(self) -> RegistryServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
