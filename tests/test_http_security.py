"""The HTTP side is served as the gRPC API is: TLS from the same certificate options, client
certificates with --client-ca, bearer tokens on the APIs, no plaintext tokens beyond loopback."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request

import pytest
import yaml

from sdn_app.core.errors import InvalidArgument
from tests.conftest import TOKENS
from tests.test_northbound_api import pki  # noqa: F401  (the fixture)
from topologies import builtin_topology
from tsdn.controller import Controller, ControllerConfig


def fetch(url: str, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10, context=context) as reply:
        return reply.status, reply.headers, reply.read()


def refused(url: str, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None):
    with pytest.raises(urllib.error.HTTPError) as error:
        fetch(url, context, headers)
    return error.value.code, error.value.headers, error.value.read()


def test_the_http_side_speaks_tls_with_the_grpc_certificate(start_controller, tokens_file, pki):  # noqa: F811
    controller = start_controller(tokens=tokens_file, tls_cert=pki / "server.pem", tls_key=pki / "server.key",
                                  listen_http="127.0.0.1:0")
    trusting = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    status, _, body = fetch(f"https://{controller.http_address}/healthz", trusting)
    assert status == 200 and body == b"ok\n"
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plaintext is not answered
        fetch(f"http://{controller.http_address}/healthz")
    untrusting = ssl.create_default_context(cafile=str(pki / "rogue-ca.pem"))
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        fetch(f"https://{controller.http_address}/healthz", untrusting)


def test_client_certificates_are_required_with_a_client_ca(start_controller, tokens_file, pki):  # noqa: F811
    controller = start_controller(tokens=tokens_file, tls_cert=pki / "server.pem", tls_key=pki / "server.key",
                                  client_ca=pki / "ca.pem", listen_http="127.0.0.1:0")
    url = f"https://{controller.http_address}/healthz"
    certified = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    certified.load_cert_chain(pki / "client.pem", pki / "client.key")
    assert fetch(url, certified)[0] == 200
    anonymous = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
        fetch(url, anonymous)
    rogue = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    rogue.load_cert_chain(pki / "rogue-client.pem", pki / "rogue-client.key")
    with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
        fetch(url, rogue)


def test_plaintext_tokens_are_refused_beyond_loopback(tmp_path, tokens_file):
    state = tmp_path / "plain.db"
    with pytest.raises(InvalidArgument, match=r"--listen-http 0\.0\.0\.0:0: the SENSE and ALTO APIs .* plaintext"):
        Controller(ControllerConfig(topology=builtin_topology("sc16"), listen_grpc="127.0.0.1:0", state=state,
                                    tokens=tokens_file, listen_http="0.0.0.0:0"))
    assert not state.exists()


def test_the_apis_ask_for_a_token_and_the_map_does_not(start_controller, tokens_file):
    controller = start_controller(tokens=tokens_file, listen_http="127.0.0.1:0")
    base = f"http://{controller.http_address}"
    assert fetch(f"{base}/api/snapshot")[0] == 200  # the read-only map: no token
    token = TOKENS["rucio"][1]
    for path in ("/alto/directory", "/sense/api/instance"):
        status, headers, body = refused(f"{base}{path}")
        assert status == 401 and "Bearer" in headers["WWW-Authenticate"], path
        assert b"no credentials" in body, body
        assert refused(f"{base}{path}", headers={"Authorization": "Bearer not-a-token-of-ours"})[0] == 401
        assert fetch(f"{base}{path}", headers={"Authorization": f"Bearer {token}"})[0] == 200, path
    basic = base64.b64encode(f"rucio:{token}".encode()).decode()  # the OpenALTO client's way
    status, headers, body = fetch(f"{base}/alto/directory", headers={"Authorization": f"Basic {basic}"})
    assert status == 200 and json.loads(body)["resources"]


def test_a_client_certificate_named_in_the_tokens_file_is_its_principal(start_controller, tmp_path, pki):  # noqa: F811
    tokens = tmp_path / "cert-tokens.yaml"
    tokens.write_text(yaml.safe_dump({"tokens": [
        {"principal": "campus-nsa", "role": "service", "certificate": "client"},
        {"principal": "noc", "role": "admin", "token": TOKENS["noc"][1]}]}))
    tokens.chmod(0o600)
    controller = start_controller(tokens=tokens, tls_cert=pki / "server.pem", tls_key=pki / "server.key",
                                  client_ca=pki / "ca.pem", listen_http="127.0.0.1:0")
    certified = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    certified.load_cert_chain(pki / "client.pem", pki / "client.key")
    status, _, body = fetch(f"https://{controller.http_address}/sense/api/instance", certified)
    assert status == 200 and body  # the certificate is the principal: no token needed
    rogue = tmp_path / "other-tokens.yaml"
    rogue.write_text(yaml.safe_dump({"tokens": [
        {"principal": "campus-nsa", "role": "service", "certificate": "someone-else"}]}))
    rogue.chmod(0o600)
    other = start_controller(tokens=rogue, tls_cert=pki / "server.pem", tls_key=pki / "server.key",
                             client_ca=pki / "ca.pem", listen_http="127.0.0.1:0", state=tmp_path / "other.db")
    code, _, _ = refused(f"https://{other.http_address}/sense/api/instance", certified)
    assert code == 401  # a certificate the tokens file does not name is nobody


def test_a_tokens_entry_with_two_secrets_or_an_agent_certificate_is_refused(tmp_path):
    from northbound.auth import Authenticator

    for entry, words in (({"principal": "a", "role": "service", "certificate": "x", "token": "t" * 20},
                          "exactly one of token, sha256 or certificate"),
                         ({"principal": "a", "role": "agent", "certificate": "x"}, "agents authenticate with tokens")):
        path = tmp_path / "t.yaml"
        path.write_text(yaml.safe_dump({"tokens": [entry]}))
        with pytest.raises(InvalidArgument, match=words):
            Authenticator.from_file(path)
