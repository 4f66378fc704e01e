"""Signed entries: HMAC and Ed25519, key formats, and readers that trust only signed entries."""

import base64
import hashlib
import json
import struct

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.conftest import JAX_PROGRAM, make_key, run_json
from xlacache import api, counters, entry, signing
from xlacache.cache import CompilationCache
from xlacache.errors import ConfigError, CorruptEntryError, UntrustedEntryError
from xlacache.stores.local import LocalStore

KINDS = ["hmac", "ed25519"]


def keypair(kind: str) -> tuple[signing.SigningKey, signing.TrustedKeys, str, str]:
    private, public = signing.generate(kind)
    return signing.load_signing_key(private), signing.load_trusted_keys(public), private, public


def signed_blob(signer, n: int = 1, payload: bytes = b"executable" * 100) -> bytes:
    return entry.encode(make_key(n), payload, compile_seconds=2.0, label="jit_f", signer=signer)


def edit_header(blob: bytes, body: bytes | None = None, **changes) -> bytes:
    """Change header fields (and the body) and fix the header checksum: what an attacker
    who can write the store can do. The signature is kept."""
    found = entry.decode(blob)
    fields = {**found.header.to_dict(), **changes}
    header_bytes = json.dumps(fields, sort_keys=True).encode()
    prelude = struct.pack(
        ">4sHI32s", entry.MAGIC, entry.FORMAT_VERSION, len(header_bytes),
        hashlib.sha256(header_bytes).digest(),
    )  # fmt: skip
    return prelude + header_bytes + (bytes(found.body) if body is None else body)


@pytest.mark.parametrize("kind", KINDS)
def test_signed_entry_is_trusted_by_its_key_only(kind):
    signer, trusted, _, _ = keypair(kind)
    blob = signed_blob(signer)
    header = entry.verify(blob, make_key(1))
    assert header.signer == signer.key_id and header.signer.startswith(f"{kind}-")
    assert trusted.check(header) == signer.key_id
    _, other, _, _ = keypair(kind)
    with pytest.raises(UntrustedEntryError, match="not trusted") as caught:
        other.check(header)
    assert caught.value.reason == "foreign"
    unsigned = entry.read_header(entry.encode(make_key(1), b"x", compile_seconds=1.0))
    with pytest.raises(UntrustedEntryError, match="not signed") as caught:
        trusted.check(unsigned)
    assert caught.value.reason == "unsigned"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "changes",
    [
        {"compile_seconds": 0.001},
        {"label": "jit_evil"},
        {"context": {"device_ids": [7]}},
        {"summary": {"jaxlib": {"version": "9"}}},
    ],
)
def test_tampered_header_keeps_a_signature_that_no_longer_matches(kind, changes):
    signer, trusted, _, _ = keypair(kind)
    tampered = edit_header(signed_blob(signer), **changes)
    header = entry.verify(tampered)  # intact as far as checksums go
    assert trusted.status(header) == "bad_signature"
    with pytest.raises(UntrustedEntryError, match="does not match"):
        signing.check_entry(tampered, trusted)


@pytest.mark.parametrize("kind", KINDS)
def test_swapped_body_is_refused(kind):
    signer, trusted, _, _ = keypair(kind)
    evil = entry.decode(entry.encode(make_key(1), b"evil" * 100, compile_seconds=2.0))
    # The body's digest is in the header: a new body needs a new digest, which the
    # signature covers.
    forged = edit_header(
        signed_blob(signer),
        bytes(evil.body),
        payload_sha256=evil.header.payload_sha256,
        body_size=evil.header.body_size,
        payload_size=evil.header.payload_size,
    )
    assert entry.decode(forged).payload() == b"evil" * 100
    assert trusted.status(entry.verify(forged)) == "bad_signature"
    stolen = edit_header(signed_blob(signer, 2), key=make_key(1))  # another key's signature
    assert trusted.status(entry.read_header(stolen)) == "bad_signature"


def test_signature_field_garbage_is_a_bad_signature():
    signer, trusted, _, _ = keypair("ed25519")
    blob = edit_header(signed_blob(signer), signature="%%% not base64")
    assert trusted.status(entry.read_header(blob)) == "bad_signature"


def test_sign_an_existing_entry_keeps_key_and_body():
    signer, trusted, _, _ = keypair("ed25519")
    plain = entry.encode(make_key(3), b"payload" * 50, compile_seconds=1.0, module_text="m")
    signed = entry.sign(plain, signer)
    before, after = entry.decode(plain), entry.decode(signed)
    assert bytes(after.body) == bytes(before.body) and after.payload() == before.payload()
    assert after.module_text() == "m"
    assert trusted.check(after.header) == signer.key_id
    assert entry.signed_form(after.header).startswith(entry.SIGNATURE_DOMAIN)


# -- key formats -------------------------------------------------------------------


def test_key_texts_files_and_pem(tmp_path):
    private = Ed25519PrivateKey.generate()
    pem_private = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pem_public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    ssh_public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    (tmp_path / "writer.pem").write_bytes(pem_private)
    (tmp_path / "reader.pem").write_bytes(pem_public)
    signer = signing.load_signing_key(tmp_path / "writer.pem")
    assert signing.load_trusted_keys(str(tmp_path / "reader.pem")).key_ids == [signer.key_id]
    assert signing.load_trusted_keys([ssh_public.decode() + " me@host"]).key_ids == [signer.key_id]
    hmac_text, _ = signing.generate("hmac")
    ed_text, ed_public = signing.generate("ed25519")
    keyring = tmp_path / "trusted"
    keyring.write_text(f"# readers' keys\n\n{hmac_text}\n{ed_public}\n")
    many = signing.load_trusted_keys(f"{keyring},{tmp_path / 'reader.pem'}")
    expected = {signing.load_signing_key(t).key_id for t in (hmac_text, ed_text)}
    assert set(many.key_ids) == expected | {signer.key_id}
    # A private key given as trusted stands for its public half.
    assert signing.load_trusted_keys(ed_text).key_ids == [signing.load_signing_key(ed_text).key_id]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("hmac:c2hvcnQ=", "at least 16 bytes"),
        ("hmac:!!!", "not base64"),
        ("ed25519-private:AAAA", "malformed"),
        ("ed25519-public:" + base64.b64encode(b"x" * 32).decode(), "can only verify"),
        ("/no/such/key/file", "cannot read key file"),
    ],
)
def test_bad_signing_keys_are_config_errors(spec, message):
    with pytest.raises(ConfigError, match=message):
        signing.load_signing_key(spec)


def test_unknown_key_format_in_a_file(tmp_path):
    (tmp_path / "k").write_text("rsa:AAAA\n")
    with pytest.raises(ConfigError, match="unknown key format"):
        signing.load_trusted_keys(str(tmp_path / "k"))
    with pytest.raises(ConfigError, match="no trusted keys"):
        signing.load_trusted_keys(" , ")


# -- the cache's policy ------------------------------------------------------------


def never(*_):
    raise AssertionError("must not be deserialized")


@pytest.mark.fallback
@pytest.mark.parametrize("kind", KINDS)
def test_reader_with_trusted_keys_refuses_unsigned_and_foreign_entries(tmp_path, kind):
    signer, trusted, _, _ = keypair(kind)
    stranger, _, _, _ = keypair(kind)
    store = LocalStore(tmp_path / "c")
    store.put(make_key(1), entry.encode(make_key(1), b"planted", compile_seconds=1.0))
    store.put(make_key(2), signed_blob(stranger, 2))
    store.put(make_key(3), signed_blob(signer, 3))
    cache = CompilationCache(store, readonly=True, trusted=trusted)
    with pytest.warns(counters.CacheWarning, match="untrusted"):
        for n in (1, 2):
            got = cache.get_or_compile(make_key(n), compile=lambda: b"compiled", load=never,
                                       serialize=never)  # fmt: skip
            assert got == b"compiled"
    assert cache.get_or_compile(make_key(3), compile=never, load=lambda p: p,
                                serialize=never).startswith(b"executable")  # fmt: skip
    figures = counters.snapshot()
    assert figures["errors"] == {"untrusted": 2}
    assert figures["misses"] == 2 and figures["hits"] == 1
    assert store.contains(make_key(1))  # refused, not removed: others may trust it


@pytest.mark.fallback
def test_writer_signs_and_replaces_an_untrusted_entry(tmp_path):
    signer, trusted, _, _ = keypair("ed25519")
    store = LocalStore(tmp_path / "c")
    store.put(make_key(1), entry.encode(make_key(1), b"planted", compile_seconds=1.0))
    cache = CompilationCache(store, signer=signer, trusted=trusted)
    with pytest.warns(counters.CacheWarning):
        cache.get_or_compile(make_key(1), compile=lambda: b"honest", load=never, serialize=bytes)
    header = store.read_header(make_key(1))
    assert trusted.check(header) == signer.key_id
    assert cache.get_or_compile(make_key(1), compile=never, load=lambda p: p,
                                serialize=never) == b"honest"  # fmt: skip


@pytest.mark.fallback  # untrusted entries: misses, compiled
@pytest.mark.parametrize("own_key", [None, "foreign"], ids=["no key", "untrusted key"])
def test_a_trusting_writer_that_cannot_sign_trusted_stores_nothing(tmp_path, own_key):
    """It would refuse what it stored: it compiles, keeps the result in memory, and leaves
    the stored entry as it was (issue 27, 6)."""
    _, trusted, _, _ = keypair("ed25519")
    signer = keypair("hmac")[0] if own_key else None
    store = LocalStore(tmp_path / "c")
    store.put(make_key(1), entry.encode(make_key(1), b"planted", compile_seconds=1.0))
    path = store.entry_path(make_key(1))
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    cache = CompilationCache(store, signer=signer, trusted=trusted)
    with pytest.warns(counters.CacheWarning, match="untrusted"):
        for _ in range(2):
            assert cache.get_or_compile(make_key(1), compile=lambda: b"fresh", load=never,
                                        serialize=bytes) == b"fresh"  # fmt: skip
        got = cache.get_or_compile(make_key(2), compile=lambda: b"new", load=never,
                                   serialize=bytes)  # fmt: skip
    assert got == b"new" and not store.contains(make_key(2))
    assert not cache.save_alias(make_key(3), {"target": make_key(2)})
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    figures = counters.snapshot()
    assert figures["writes"] == 0 and figures["kept_unsigned"] == 3
    assert figures["errors"] == {"untrusted": 2}


def test_without_trusted_keys_behaviour_is_unchanged(tmp_path):
    stranger, _, _, _ = keypair("hmac")
    store = LocalStore(tmp_path / "c")
    store.put(make_key(1), entry.encode(make_key(1), b"plain", compile_seconds=1.0))
    store.put(make_key(2), signed_blob(stranger, 2))
    cache = CompilationCache(store)
    for n in (1, 2):
        cache.get_or_compile(make_key(n), compile=never, load=lambda p: p, serialize=never)
    assert counters.snapshot()["hits"] == 2 and counters.snapshot()["errors"] == {}


def test_keys_from_arguments_and_environment(tmp_path, monkeypatch):
    private, public = signing.generate("ed25519")
    (tmp_path / "writer.key").write_text(private + "\n")
    monkeypatch.setenv("XLACACHE_TRUSTED_KEYS", f"{public}, {signing.generate('hmac')[0]}")
    api.initialize_cache(tmp_path / "c", signing_key=tmp_path / "writer.key")
    cache = api.get_cache()
    assert cache.signer.key_id == signing.load_signing_key(private).key_id
    assert cache.signer.key_id in cache.trusted.key_ids and len(cache.trusted.key_ids) == 2
    assert "***" in api._config.describe() and private not in api._config.describe()


def test_unreadable_key_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read key file"):
        api.initialize_cache(tmp_path / "c", trusted_keys=[str(tmp_path / "missing.pub")])
    assert not api.is_initialized()


def test_check_entry_for_servers_requires_intact_and_signed(tmp_path):
    signer, trusted, _, _ = keypair("ed25519")
    good = signed_blob(signer)
    assert signing.check_entry(good, trusted, make_key(1)).signer == signer.key_id
    with pytest.raises(CorruptEntryError):
        signing.check_entry(good[:-1], trusted)
    with pytest.raises(UntrustedEntryError):
        signing.check_entry(entry.encode(make_key(1), b"x", compile_seconds=1.0), trusted)


# -- real JAX programs in fresh processes ------------------------------------------


def run(cache_dir, **options):
    return run_json(JAX_PROGRAM, str(cache_dir), json.dumps(options))


@pytest.mark.fallback
@pytest.mark.slow
def test_real_jax_reader_compiles_past_planted_and_foreign_entries(tmp_path):
    _, _, private, public = keypair("ed25519")
    stranger_private, _ = signing.generate("ed25519")
    planted = run(tmp_path / "planted")  # unsigned entries of every program
    foreign = run(tmp_path / "foreign", signing_key=stranger_private)
    for cache_dir in ("planted", "foreign"):
        reader = run(tmp_path / cache_dir, trusted_keys=[public], readonly=True, prefetch=0)
        stats = reader["stats"]
        assert stats["hits"] == 0 and stats["misses"] == planted["stats"]["misses"]
        assert stats["errors"] == {"untrusted": stats["misses"]} and stats["load_seconds"] == 0
        assert len(reader["warnings"]) == 1 and "untrusted" in reader["warnings"][0]
        assert reader["loss"] == planted["loss"] == foreign["loss"]
    # A trusting process with no signing key (not a reader) rewrites nothing, run after run.
    with LocalStore(tmp_path / "planted") as store:
        paths = [store.entry_path(i.key) for i in store.list()]
    mtimes = [p.stat().st_mtime_ns for p in paths]
    for _ in range(2):
        stats = run(tmp_path / "planted", trusted_keys=[public], prefetch=0)["stats"]
        assert stats["writes"] == 0 and stats["kept_unsigned"] == stats["misses"] > 0
    assert [p.stat().st_mtime_ns for p in paths] == mtimes
    # The trusted writer signs what it compiles; then the reader hits.
    run(tmp_path / "signed", signing_key=private)
    reader = run(tmp_path / "signed", trusted_keys=[public], readonly=True)
    assert reader["stats"]["misses"] == 0 and reader["stats"]["errors"] == {}
    # A signed entry whose header was edited (signature kept) is refused.
    with LocalStore(tmp_path / "signed") as store:
        info = next(i for i in store.list() if i.label == "jit_step")
        path = store.entry_path(info.key)
        path.write_bytes(edit_header(path.read_bytes(), compile_seconds=0.0))
    tampered = run(tmp_path / "signed", trusted_keys=[public], readonly=True, prefetch=0)
    assert tampered["stats"]["errors"] == {"untrusted": 1}
    assert tampered["stats"]["misses"] == 1 and tampered["loss"] == reader["loss"]


@pytest.mark.fallback
@pytest.mark.slow
def test_real_jax_processes_sign_and_trust_with_a_shared_secret(tmp_path):
    """The flow above with an HMAC key (its unsigned and tampered cases are the same code)."""
    _, _, secret, trusted = keypair("hmac")
    stranger, _ = signing.generate("hmac")
    writer = run(tmp_path / "signed", signing_key=secret)
    reader = run(tmp_path / "signed", trusted_keys=[trusted], readonly=True)
    assert reader["stats"]["misses"] == 0 and reader["stats"]["errors"] == {}
    assert reader["loss"] == writer["loss"]
    run(tmp_path / "foreign", signing_key=stranger)
    refused = run(tmp_path / "foreign", trusted_keys=[trusted], readonly=True, prefetch=0)
    assert refused["stats"]["hits"] == 0 and refused["stats"]["misses"] > 0
    assert refused["stats"]["errors"] == {"untrusted": refused["stats"]["misses"]}
    assert refused["loss"] == writer["loss"]
