"""The local broker's secured mode without starting it: its listeners, its SASL and TLS settings, and the key
material it makes (a CA, a broker certificate for 127.0.0.1 and localhost, a client certificate with an encrypted
key). The default broker's configuration stays as it was."""
from __future__ import annotations

import ipaddress

import javaproperties
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from connector.errors import SetupError
from connector.local.kafka import LocalKafka, make_ca, write_certificates


def _properties(broker: LocalKafka) -> dict[str, str]:
    return javaproperties.loads(broker._write_config().read_text())


def test_the_default_broker_has_only_its_plaintext_listener(tmp_path):
    broker = LocalKafka(tmp_path)
    conf = _properties(broker)
    assert conf["listeners"] == f"PLAINTEXT://127.0.0.1:{broker.port},CONTROLLER://127.0.0.1:{broker.controller_port}"
    assert conf["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{broker.port}"
    assert conf["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    assert not [key for key in conf if key.startswith(("ssl.", "sasl.", "listener.name."))]
    assert not (tmp_path / "tls").exists() and broker.access is None
    with pytest.raises(SetupError, match="secured=True"):
        broker.sasl_ssl_bootstrap


def test_a_secured_broker_adds_sasl_ssl_and_mtls_listeners_with_pem_key_material(tmp_path):
    broker = LocalKafka(tmp_path, secured=True)
    conf = _properties(broker)
    assert conf["advertised.listeners"] == (f"PLAINTEXT://127.0.0.1:{broker.port},"
                                            f"SASL_SSL://127.0.0.1:{broker.sasl_ssl_port},"
                                            f"MTLS://127.0.0.1:{broker.mtls_port}")
    assert conf["inter.broker.listener.name"] == "PLAINTEXT"
    assert conf["listener.security.protocol.map"].endswith(",SASL_SSL:SASL_SSL,MTLS:SSL")
    assert conf["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert conf["listener.name.mtls.ssl.client.auth"] == "required"
    assert conf["ssl.keystore.type"] == conf["ssl.truststore.type"] == "PEM"
    chain = x509.load_pem_x509_certificates(conf["ssl.keystore.certificate.chain"].encode())
    assert [c.subject.rfc4514_string() for c in chain] == ["CN=lakesink-local-broker", "CN=lakesink-local-ca"]
    serialization.load_pem_private_key(conf["ssl.keystore.key"].encode(), None)  # unencrypted, read as it is

    assert broker.sasl_ssl_bootstrap == f"127.0.0.1:{broker.sasl_ssl_port}"
    sasl = broker.secured_settings("sasl_ssl")
    assert sasl == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "lakesink",
                    "sasl.password": broker.access.password, "ssl.ca.location": str(tmp_path / "tls" / "ca.pem")}
    mtls = broker.secured_settings("mtls")
    assert mtls["security.protocol"] == "SSL" and mtls["ssl.key.password"] == broker.access.key_password


def test_the_certificates_name_the_loopback_address_and_chain_to_the_ca(tmp_path):
    access = write_certificates(tmp_path)
    ca = x509.load_pem_x509_certificate(access.ca_location.read_bytes())
    broker = x509.load_pem_x509_certificate((tmp_path / "broker.pem").read_bytes())
    client = x509.load_pem_x509_certificate(access.certificate_location.read_bytes())
    san = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    for cert in (broker, client):
        assert cert.issuer == ca.subject
        cert.verify_directly_issued_by(ca)
    with pytest.raises(TypeError):  # the client key is encrypted: ssl.key.password opens it
        serialization.load_pem_private_key(access.key_location.read_bytes(), None)
    key = serialization.load_pem_private_key(access.key_location.read_bytes(), access.key_password.encode())
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert write_certificates(tmp_path) == access  # made once: a restarted broker keeps them


def test_another_ca_is_not_the_brokers(tmp_path):
    access = write_certificates(tmp_path / "tls")
    other, _ = make_ca(tmp_path / "other", "other-ca")
    broker = x509.load_pem_x509_certificate((tmp_path / "tls" / "broker.pem").read_bytes())
    assert (tmp_path / "other" / "other-ca.pem").exists()
    with pytest.raises(Exception):
        broker.verify_directly_issued_by(other)
    assert access.ca_location.read_bytes() != (tmp_path / "other" / "other-ca.pem").read_bytes()
