"""`xlacache keygen`, `sign`, `verify --trusted-keys`, and `diff`/`explain` input errors."""

import json
import stat

import pytest

from tests.cli_helpers import assert_one_line_error, cli_json, key_for, make_cache, run
from xlacache import entry, signing
from xlacache.stores.local import LocalStore


@pytest.fixture
def cache(tmp_path):
    root = tmp_path / "c"
    return root, make_cache(root, ["a", "b", "c"])


def keygen(tmp_path, kind="ed25519", name="writer.key"):
    result = run("keygen", tmp_path / name, "--type", kind)
    assert result.exit_code == 0, result.output
    return tmp_path / name


def test_keygen_writes_a_private_key_and_a_public_key(tmp_path):
    private = keygen(tmp_path)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    signer = signing.load_signing_key(private)
    assert signing.load_trusted_keys(str(tmp_path / "writer.key.pub")).key_ids == [signer.key_id]
    assert (tmp_path / "writer.key.pub").read_text().startswith("ed25519-public:")
    assert_one_line_error(run("keygen", private), 2)  # never overwritten by accident
    assert run("keygen", private, "--force").exit_code == 0
    assert signing.load_signing_key(private).key_id != signer.key_id
    secret = keygen(tmp_path, "hmac", "shared.key")
    assert secret.read_text().startswith("hmac:") and not (tmp_path / "shared.key.pub").exists()
    assert_one_line_error(run("keygen", tmp_path / "x", "--type", "rsa"), 2)


def test_sign_then_verify_with_trusted_keys(cache, tmp_path):
    root, keys = cache
    private = keygen(tmp_path)
    public = tmp_path / "writer.key.pub"
    unsigned = run("verify", root, "--trusted-keys", public, "--json")
    assert unsigned.exit_code == 1
    trust = json.loads(unsigned.stdout)["trust"]
    assert sorted(trust["unsigned"]) == sorted(keys) and trust["trusted"] == 0
    assert "not signed by a trusted key" in unsigned.stderr
    signed = cli_json("sign", root, "--key", private)
    assert sorted(signed["signed"]) == sorted(keys) and signed["already"] == 0
    assert cli_json("sign", root, "--key", private)["already"] == 3  # idempotent
    verified = cli_json("verify", root, "--trusted-keys", public)
    assert verified["trust"]["trusted"] == 3 and verified["corrupt"] == []
    with LocalStore(root, readonly=True) as store:
        for key in keys:
            blob = store.get(key)
            assert entry.decode(blob).payload()  # body intact after signing
            signing.check_entry(blob, signing.load_trusted_keys(str(public)), key)


def test_verify_names_foreign_and_unsigned_entries(cache, tmp_path):
    root, keys = cache
    ours, theirs = keygen(tmp_path, name="ours.key"), keygen(tmp_path, name="theirs.key")
    cli_json("sign", root, "--key", theirs)
    with LocalStore(root) as store:  # one more entry, unsigned
        store.put(key_for("d"), entry.encode(key_for("d"), b"d" * 100, compile_seconds=1.0))
    result = run("verify", root, "--trusted-keys", f"{ours}.pub")
    assert result.exit_code == 1
    for key in keys:
        assert f"foreign: {key}" in result.stdout
    assert f"unsigned: {key_for('d')}" in result.stdout
    mixed = run("verify", root, "--trusted-keys", f"{ours}.pub,{theirs}.pub", "--json")
    trust = json.loads(mixed.stdout)["trust"]
    assert trust["trusted"] == 3 and trust["unsigned"] == [key_for("d")] and trust["foreign"] == []


def test_sign_leaves_foreign_entries_unless_resign(cache, tmp_path):
    root, keys = cache
    ours, theirs = keygen(tmp_path, name="ours.key"), keygen(tmp_path, name="theirs.key")
    cli_json("sign", root, "--key", theirs)
    kept = cli_json("sign", root, "--key", ours)
    assert kept["signed"] == [] and sorted(kept["foreign"]) == sorted(keys)
    redone = cli_json("sign", root, "--key", ours, "--resign")
    assert sorted(redone["signed"]) == sorted(keys)
    assert run("verify", root, "--trusted-keys", f"{ours}.pub").exit_code == 0


def test_sign_key_from_the_environment(cache, tmp_path):
    root, keys = cache
    text, _ = signing.generate("hmac")
    result = run("sign", root, "--json", env={"XLACACHE_SIGNING_KEY": text})
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(result.stdout)["signed"]) == sorted(keys)
    assert run("verify", root, "--trusted-keys", text).exit_code == 0


@pytest.mark.parametrize(
    "args",
    [
        ["sign", "{root}", "--key", "hmac:short"],
        ["sign", "{root}", "--key", "{tmp}/missing.key"],
        ["sign", "{root}"],
        ["verify", "{root}", "--trusted-keys", "rsa:nope"],
        ["verify", "{root}", "--trusted-keys", ""],
        ["diff", "{root}", "{key}", "0" * 64],
        ["diff", "{root}", "{key}", "xyz"],
        ["diff", "{root}"],
        ["explain", "{tmp}/not-a-cache"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(cache, tmp_path, args):
    root, keys = cache
    filled = [a.format(root=root, tmp=tmp_path, key=keys[0]) for a in args]
    assert_one_line_error(run(*filled), 2)
    with LocalStore(root, readonly=True) as store:
        assert all(not store.read_header(k).signer for k in keys)  # nothing was signed
