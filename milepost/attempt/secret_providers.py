"""Where a keychain `kind: secrets` entry fetches its fields (DSL 12), in the worker, when
the keychain resolves for an attempt:

```yaml
keychain:
  - {name: api, kind: secrets, provider: env, map: {token: API_TOKEN}}
  - {name: db, kind: secrets, provider: milepost, map: {password: pg_main.password}}
```

- `env`: the worker's environment variable named by the path.
- `milepost`: `<credential>.<field>` of the vault (the credential lookup the tools take);
  the credential is the text before the last dot, since a credential name may hold dots.
- `gcp`, `aws`, `azure`: optional extras milepost does not ship; naming one is valid and
  fails at run time with the `pip install` line that would provide it.

Every value fetched is a secret: `keychain.secret_texts` masks it like a `static` value.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from milepost.errors import MilepostError
from milepost.playbook.model import SECRET_PROVIDERS
from milepost.tools.base import CredentialLookup

EXTRAS = {"gcp": "gcp", "aws": "aws", "azure": "azure"}
"""Cloud provider -> the optional extra that would bring its client."""


class SecretUnavailable(MilepostError):
    """A `secrets` field cannot be fetched: unset variable, unknown credential or field,
    a provider whose extra is not installed."""

    code = "secret_unavailable"


Fetch = Callable[[str, str], Any]
"""(field, path) -> the value; raises SecretUnavailable."""


def fetcher(
    provider: str,
    where: str,
    credentials: CredentialLookup | None,
    environ: Mapping[str, str] | None = None,
) -> Fetch:
    """How `provider` fetches one field; `where` names the keychain entry in messages.
    A cloud provider fails here, before any field is fetched."""
    if provider == "env":
        env = os.environ if environ is None else environ
        return lambda field, path: _env(env, where, field, path)
    if provider == "milepost":
        return lambda field, path: _vault(credentials, where, field, path)
    extra = EXTRAS.get(provider)
    if extra is not None:
        raise SecretUnavailable(
            f"{where}: provider {provider!r} needs the optional extra milepost[{extra}], "
            f"which is not installed on this worker (pip install 'milepost[{extra}]'); "
            "or fetch the value with provider env or milepost",
            provider=provider,
        )
    raise SecretUnavailable(
        f"{where}: unknown provider {provider!r} (expected one of {', '.join(SECRET_PROVIDERS)})",
        provider=provider,
    )


def vault_path(path: str) -> tuple[str, str] | None:
    """`<credential>.<field>` split at its last dot; None when it is not of that form."""
    credential, dot, field = path.rpartition(".")
    return (credential, field) if dot and credential and field else None


def _env(environ: Mapping[str, str], where: str, field: str, path: Any) -> str:
    if not isinstance(path, str) or not path:
        raise SecretUnavailable(
            f"{where}: map.{field}: expected an environment variable name, got {path!r}"
        )
    value = environ.get(path)
    if value is None:
        raise SecretUnavailable(
            f"{where}: map.{field}: environment variable {path!r} is not set on the worker",
            variable=path,
        )
    return value


def _vault(credentials: CredentialLookup | None, where: str, field: str, path: Any) -> Any:
    split = vault_path(path) if isinstance(path, str) else None
    if split is None:
        raise SecretUnavailable(
            f"{where}: map.{field}: expected '<credential>.<field>', got {path!r}"
        )
    name, key = split
    data = credentials(name) if credentials is not None else None
    if data is None:
        raise SecretUnavailable(
            f"{where}: map.{field}: credential {name!r} is not registered", credential=name
        )
    if key == "type" or key not in data:
        raise SecretUnavailable(
            f"{where}: map.{field}: credential {name!r} has no field {key!r}", credential=name
        )
    return data[key]
