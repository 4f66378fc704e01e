"""`xlacache serve --require-signed-by KEYS`: only uploads a required key signed are stored."""

from __future__ import annotations

import json
import signal

import grpc
import pytest
from srvutil import start_server

from tests.conftest import JAX_PROGRAM, make_key, run_json
from tests.test_signing import edit_header
from xlacache import counters, entry, signing
from xlacache.errors import ConfigError, UntrustedEntryError
from xlacache.protocol import status
from xlacache.server.config import load_config
from xlacache.stores.local import LocalStore
from xlacache.stores.remote import GrpcStore
from xlacache.stores.tiered import TieredStore

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """(writer's signing key, its public key file, a stranger's signing key)."""
    root = tmp_path_factory.mktemp("keys")
    private, public = signing.generate("ed25519")
    (root / "writer.pub").write_text(public + "\n")
    stranger, _ = signing.generate("ed25519")
    writer = signing.load_signing_key(private)
    return writer, root / "writer.pub", signing.load_signing_key(stranger)


@pytest.fixture(scope="module")
def signed_server(tmp_path_factory, keys):
    srv = start_server(tmp_path_factory.mktemp("signed"), "--require-signed-by", str(keys[1]))
    yield srv
    srv.stop(signal.SIGKILL)


def blob_for(n: int, signer=None, size: int = 3 << 20) -> tuple[str, bytes]:
    """An entry of a few chunks (the header arrives first, the body after)."""
    key = make_key(n)
    payload = bytes(range(256)) * (size // 256)
    return key, entry.encode(key, payload, compile_seconds=2.0, label="jit_f", signer=signer)


def refused(store: GrpcStore, key: str, blob: bytes) -> UntrustedEntryError:
    with pytest.raises(UntrustedEntryError) as caught:
        store.put(key, blob)
    assert not store.contains(key), "a refused upload left an entry"
    return caught.value


@pytest.mark.slow
def test_unsigned_foreign_and_tampered_uploads_are_refused(signed_server, keys):
    writer, _, stranger = keys
    store = GrpcStore(signed_server.url, timeout=10)
    assert refused(store, *blob_for(1)).reason == "unsigned"
    assert refused(store, *blob_for(2, stranger)).reason == "foreign"
    key, good = blob_for(3, writer)
    tampered = edit_header(good, compile_seconds=0.001)  # checksums fixed, signature kept
    error = refused(store, key, tampered)
    assert error.reason == "bad_signature" and "does not match" in str(error)
    assert error.kind == "untrusted"
    # The one the writer signed is stored, and reads back intact and trusted.
    store.put(key, good)
    assert store.get(key) == good
    assert signing.load_trusted_keys(str(keys[1])).check(entry.read_header(good))
    assert [i.key for i in store.list()] == [key]
    assert list((signed_server.store / "tmp").iterdir()) == []


@pytest.mark.slow
def test_refusal_is_permission_denied_with_a_reason_and_detail(signed_server):
    """What any gRPC client sees: the status code and the machine-readable reason."""
    key, blob = blob_for(4, size=4096)
    channel = grpc.insecure_channel(signed_server.address)
    put = channel.stream_unary("/xlacache.v1.Cache/Put")
    store = GrpcStore(signed_server.url)
    messages = store._put_messages(key, blob, entry.read_header(blob).payload_sha256)
    with pytest.raises(grpc.RpcError) as caught:
        put(messages, timeout=10)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert status.reason_of(caught.value) == "untrusted_entry"
    assert dict(caught.value.trailing_metadata())[status.DETAIL_KEY] == "unsigned"
    assert "is not signed" in caught.value.details()
    channel.close()


@pytest.mark.fallback
def test_a_tier_that_does_not_sign_counts_untrusted_and_stops_uploading(tmp_path, signed_server):
    remote = GrpcStore(signed_server.url, timeout=10)
    refusals_before = remote.server_stats().counters["requests.Put.PERMISSION_DENIED"]
    tier = TieredStore(LocalStore(tmp_path / "local"), remote)
    with pytest.warns(counters.CacheWarning, match="untrusted"):
        for n in (10, 11):
            tier.put(*blob_for(n, size=4096))
            assert tier.flush(30)
    figures = counters.snapshot()
    assert figures["errors"] == {"untrusted": 1}, figures
    assert figures["uploads"] == 0 and figures["uploads_dropped"] == 1
    assert tier.local.contains(make_key(11))  # the local tier still works
    refusals = remote.server_stats().counters["requests.Put.PERMISSION_DENIED"]
    assert refusals == refusals_before + 1  # the second entry was not offered
    tier.close()


@pytest.mark.fallback
@pytest.mark.slow
def test_real_jax_writer_signs_and_the_server_takes_only_its_entries(tmp_path, keys):
    _, public_file, _ = keys
    private_file = tmp_path / "writer.key"
    private_file.write_text(keys[0].text() + "\n")
    srv = start_server(tmp_path, "--require-signed-by", str(public_file))
    try:
        unsigned = run_json(JAX_PROGRAM, str(tmp_path / "a"), json.dumps({"remote": srv.url}))
        assert unsigned["stats"]["errors"] == {"untrusted": 1}
        assert GrpcStore(srv.url).summary().entries == 0
        signed = run_json(
            JAX_PROGRAM,
            str(tmp_path / "b"),
            json.dumps({"remote": srv.url, "signing_key": str(private_file)}),
        )
        assert signed["stats"]["errors"] == {} and signed["loss"] == unsigned["loss"]
        stored = GrpcStore(srv.url).summary().entries
        assert stored == signed["stats"]["writes"] >= 1
    finally:
        srv.stop()


def test_setting_comes_from_flag_env_or_config_file(tmp_path, keys):
    pub = str(keys[1])
    hmac_text = signing.generate("hmac")[0]
    from_env = load_config(
        {"store": str(tmp_path)}, env={"XLACACHE_SERVE_REQUIRE_SIGNED_BY": f"{pub},{hmac_text}"}
    )
    assert len(from_env.trusted_keys().key_ids) == 2
    config_file = tmp_path / "serve.json"
    config_file.write_text(json.dumps({"store": str(tmp_path), "require_signed_by": [pub]}))
    from_file = load_config({}, config_file=str(config_file), env={})
    assert from_file.trusted_keys().key_ids == [keys[0].key_id]
    assert load_config({"store": str(tmp_path)}, env={}).trusted_keys() is None
    with pytest.raises(ConfigError, match="require_signed_by: cannot read key file"):
        load_config({"store": str(tmp_path), "require_signed_by": str(tmp_path / "nope")}, env={})


def test_unreadable_keys_stop_the_server_with_one_line(tmp_path):
    with pytest.raises(RuntimeError, match=r"exited with 2[\s\S]*require_signed_by"):
        start_server(tmp_path, "--require-signed-by", "ed25519-public:not-base64!")
