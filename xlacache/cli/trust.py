"""Signed entries from the command line: `xlacache sign` and `xlacache keygen`.

`xlacache verify --trusted-keys` (in commands.py) reports entries no trusted key signed.
Key formats: see `xlacache.signing` and docs/trust.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from xlacache import signing
from xlacache.cli.common import (
    BadInput,
    JsonOpt,
    OperationFailed,
    PathArg,
    StoreCommand,
    TokenOpt,
    open_cache,
    plural,
    print_json,
    remote_command,
    stdout,
)

KeyOpt = Annotated[
    str,
    typer.Option(
        "--key",
        envvar="XLACACHE_SIGNING_KEY",
        show_envvar=True,
        help="Signing key: hmac:..., ed25519-private:..., a PEM private key, or a file.",
    ),
]


def sign(
    path: PathArg,
    key: KeyOpt,
    resign: Annotated[
        bool, typer.Option("--resign", help="Also re-sign entries signed by another key.")
    ] = False,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Sign every entry of an existing cache, for readers that trust only signed entries.

    Entries already signed by this key are left as they are, and entries signed by
    another key too unless --resign. Corrupt entries are skipped and make the exit
    status 1.

    --json prints one object:
      {"store": URL, "key_id": str, "signed": [KEY, ...], "already": int,
      "foreign": [KEY, ...], "corrupt": [KEY, ...], "unchanged": [KEY, ...]}

    A server (grpc://) or bucket (gs://) keeps an entry once stored: signing deletes
    and stores it again, so it needs an admin token there (objectAdmin on a bucket).
    """
    signer = signing.load_signing_key(key)
    with open_cache(path, readonly=False, token=token) as store:
        report = signing.sign_store(store, signer, resign=resign)
        url = store.url
    if as_json:
        print_json(
            {
                "store": url,
                "key_id": signer.key_id,
                "signed": report.signed,
                "already": report.already,
                "foreign": report.foreign,
                "corrupt": report.corrupt,
                "unchanged": report.unchanged,
            }
        )
    else:
        console = stdout()
        for k in report.foreign:
            console.print(f"signed by another key, left alone: {k}")
        console.print(
            f"signed {plural(len(report.signed), 'entry')} in {url} with {signer.key_id}; "
            f"{report.already} already signed, {len(report.foreign)} signed by another key"
        )
    if report.corrupt:
        raise OperationFailed(f"skipped {plural(len(report.corrupt), 'corrupt entry')}")
    if report.unchanged:
        raise OperationFailed(
            f"{plural(len(report.unchanged), 'entry')} stored by another writer meanwhile, "
            "left unsigned (run sign again)"
        )


def keygen(
    out: Annotated[
        Path,
        typer.Argument(help="File for the signing key; ed25519 also writes OUT.pub for readers."),
    ],
    kind: Annotated[str, typer.Option("--type", help="ed25519 (default) or hmac.")] = "ed25519",
    force: Annotated[bool, typer.Option("--force", help="Replace existing files.")] = False,
) -> None:
    """Create a signing key (mode 0600) and, for ed25519, its public key for readers.

    Writers use the key file as XLACACHE_SIGNING_KEY; readers list OUT.pub (ed25519) or
    the same secret file (hmac) in XLACACHE_TRUSTED_KEYS.
    """
    private, public = signing.generate(kind)
    public_out = out.with_name(out.name + ".pub") if kind == "ed25519" else None
    for target in (out, public_out):
        if target is not None and target.exists() and not force:
            raise BadInput(f"{target} exists (use --force to replace it)")
    if not out.parent.is_dir():
        raise BadInput(f"no such directory: {out.parent}")
    out.unlink(missing_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(private + "\n")
    if public_out is not None:
        public_out.write_text(public + "\n")
    key_id = signing.load_signing_key(out).key_id
    readers = public_out if public_out is not None else f"{out} (the same secret)"
    stdout().print(f"key {key_id}: writers sign with {out}; readers trust {readers}")


def register(app: typer.Typer) -> None:
    app.command("sign", cls=StoreCommand)(remote_command(sign))
    app.command("keygen", cls=StoreCommand)(keygen)
