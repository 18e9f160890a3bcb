"""The credential vault: Fernet encryption at rest, key rotation, MILEPOST_SECRET_KEY."""

from __future__ import annotations

import base64
import itertools
from dataclasses import dataclass, replace
from typing import Any

import pytest
from cryptography.fernet import Fernet

from milepost.credentials import (
    CredentialUnreadable,
    SecretKeyInvalid,
    SecretKeyMissing,
    Vault,
    new_key,
    parse_keys,
)
from milepost.errors import MilepostError

PASSWORD = "s3cr3t-Pa55word!"
DATA = {
    "host": "db.internal",
    "port": 5432,
    "user": "etl",
    "password": PASSWORD,
    "database": "warehouse",
    "options": {"sslmode": "require"},
}


@dataclass(frozen=True)
class Row:
    name: str
    type: str
    ciphertext: bytes | None
    created_at: float
    updated_at: float


class FakeStore:
    """In memory, with the credential methods of the store contract."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}

    def put_credential(self, name: str, type: str, ciphertext: bytes, now: float) -> None:
        assert isinstance(ciphertext, bytes)
        old = self.rows.get(name)
        created = old.created_at if old else now
        self.rows[name] = Row(name, type, ciphertext, created, now)

    def get_credential(self, name: str) -> Row | None:
        return self.rows.get(name)

    def list_credentials(self) -> list[Row]:
        return [replace(r, ciphertext=None) for _, r in sorted(self.rows.items())]

    def delete_credential(self, name: str) -> bool:
        return self.rows.pop(name, None) is not None


def ticking() -> Any:
    counter = itertools.count(1000)
    return lambda: float(next(counter))


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


# -- round trip ----------------------------------------------------------------------------


def test_round_trip(store: FakeStore) -> None:
    vault = Vault(store, new_key(), clock=ticking())
    vault.put("pg_main", "postgres", DATA)
    assert vault.get("pg_main") == {**DATA, "type": "postgres"}
    assert vault("pg_main") == vault.get("pg_main")  # usable as the credentials lookup
    assert vault.get("nope") is None


def test_list_update_delete(store: FakeStore) -> None:
    vault = Vault(store, new_key(), clock=ticking())
    vault.put("b", "http", {"token": "tok-1234"})
    vault.put("a", "postgres", DATA)
    vault.put("b", "http", {"token": "tok-5678"})
    assert vault.list() == [
        {"name": "a", "type": "postgres", "created_at": 1001.0, "updated_at": 1001.0},
        {"name": "b", "type": "http", "created_at": 1000.0, "updated_at": 1002.0},
    ]
    assert vault.get("b") == {"token": "tok-5678", "type": "http"}
    assert vault.delete("b") is True
    assert vault.delete("b") is False
    assert vault.get("b") is None
    assert [c["name"] for c in vault.list()] == ["a"]


def test_ciphertext_never_holds_the_plaintext(store: FakeStore) -> None:
    Vault(store, new_key()).put("pg_main", "postgres", DATA)
    token = store.rows["pg_main"].ciphertext
    assert token is not None
    raw = base64.urlsafe_b64decode(token)
    for needle in (PASSWORD, "db.internal", "warehouse", "password", "pg_main"):
        assert needle.encode() not in token
        assert needle.encode() not in raw
    assert base64.b64encode(PASSWORD.encode()) not in token


def test_same_data_encrypts_differently(store: FakeStore) -> None:
    vault = Vault(store, new_key())
    vault.put("x", "postgres", DATA)
    first = store.rows["x"].ciphertext
    vault.put("x", "postgres", DATA)
    assert store.rows["x"].ciphertext != first


def test_data_must_be_a_json_mapping(store: FakeStore) -> None:
    vault = Vault(store, new_key())
    with pytest.raises(MilepostError, match="not JSON"):
        vault.put("x", "postgres", {"when": object()})
    with pytest.raises(MilepostError, match="mapping"):
        vault.put("x", "postgres", ["a"])  # type: ignore[arg-type]
    with pytest.raises(MilepostError, match="type"):
        vault.put("x", "", {})
    assert store.rows == {}


def test_str_and_memoryview_ciphertexts_are_read(store: FakeStore) -> None:
    vault = Vault(store, new_key())
    vault.put("x", "postgres", DATA)
    token = store.rows["x"].ciphertext
    assert token is not None
    store.rows["x"] = replace(store.rows["x"], ciphertext=memoryview(token))  # type: ignore[arg-type]
    assert vault.get("x") == {**DATA, "type": "postgres"}
    store.rows["x"] = replace(store.rows["x"], ciphertext=token.decode())  # type: ignore[arg-type]
    assert vault.get("x") == {**DATA, "type": "postgres"}


# -- unreadable data -----------------------------------------------------------------------


def test_wrong_key_is_a_clear_error(store: FakeStore) -> None:
    key = new_key()
    Vault(store, key).put("pg_main", "postgres", DATA)
    other = new_key()
    with pytest.raises(CredentialUnreadable) as info:
        Vault(store, other).get("pg_main")
    err = info.value
    assert err.code == "credential_unreadable"
    assert "pg_main" in err.message and "MILEPOST_SECRET_KEY" in err.message
    assert key not in err.message and other not in err.message
    assert err.to_dict()["credential"] == "pg_main"


@pytest.mark.parametrize("position", [0, 10, 40, -1])
def test_tampered_ciphertext_is_refused(store: FakeStore, position: int) -> None:
    vault = Vault(store, new_key())
    vault.put("pg_main", "postgres", DATA)
    raw = bytearray(base64.urlsafe_b64decode(store.rows["pg_main"].ciphertext or b""))
    raw[position] ^= 0x01
    store.rows["pg_main"] = replace(
        store.rows["pg_main"], ciphertext=base64.urlsafe_b64encode(bytes(raw))
    )
    with pytest.raises(CredentialUnreadable, match="altered"):
        vault.get("pg_main")


@pytest.mark.parametrize("garbage", [b"", b"not a token", b"gAAAAA", None])
def test_garbage_ciphertext_is_refused(store: FakeStore, garbage: bytes | None) -> None:
    vault = Vault(store, new_key())
    store.rows["x"] = Row("x", "postgres", garbage, 1.0, 1.0)
    with pytest.raises(CredentialUnreadable):
        vault.get("x")


def test_ciphertext_moved_to_another_credential_is_refused(store: FakeStore) -> None:
    vault = Vault(store, new_key())
    vault.put("admin", "postgres", {**DATA, "user": "admin"})
    vault.put("readonly", "postgres", DATA)
    store.rows["readonly"] = replace(
        store.rows["readonly"], ciphertext=store.rows["admin"].ciphertext
    )
    with pytest.raises(CredentialUnreadable):
        vault.get("readonly")
    store.rows["admin"] = replace(store.rows["admin"], type="http")
    with pytest.raises(CredentialUnreadable):
        vault.get("admin")


# -- keys and rotation ---------------------------------------------------------------------


def test_rotation_with_two_keys(store: FakeStore) -> None:
    old, new = new_key(), new_key()
    Vault(store, old).put("legacy", "postgres", DATA)

    both = Vault(store, f" {new} , {old} ")  # first encrypts, all decrypt
    assert both.get("legacy") == {**DATA, "type": "postgres"}
    both.put("fresh", "http", {"token": "tok-abcdef"})
    assert Vault(store, new).get("fresh") == {"token": "tok-abcdef", "type": "http"}
    with pytest.raises(CredentialUnreadable):
        Vault(store, old).get("fresh")
    with pytest.raises(CredentialUnreadable):
        Vault(store, new).get("legacy")  # not rotated yet

    assert both.rotate() == 2
    only_new = Vault(store, new)
    assert only_new.get("legacy") == {**DATA, "type": "postgres"}
    assert only_new.get("fresh") == {"token": "tok-abcdef", "type": "http"}
    with pytest.raises(CredentialUnreadable):
        Vault(store, old).get("legacy")


def test_rotate_refuses_before_writing_when_a_credential_is_unreadable(store: FakeStore) -> None:
    Vault(store, new_key()).put("lost", "postgres", DATA)
    before = dict(store.rows)
    with pytest.raises(CredentialUnreadable):
        Vault(store, new_key()).rotate()
    assert store.rows == before


def test_bytes_key_is_accepted(store: FakeStore) -> None:
    key = Fernet.generate_key()
    Vault(store, key).put("x", "postgres", DATA)
    assert Vault(store, key.decode()).get("x") == {**DATA, "type": "postgres"}


def test_new_key_is_a_fernet_key() -> None:
    a, b = new_key(), new_key()
    assert a != b and len(a) == 44
    assert Fernet(a.encode()).decrypt(Fernet(a.encode()).encrypt(b"x")) == b"x"


def test_from_env(store: FakeStore, monkeypatch: pytest.MonkeyPatch) -> None:
    key = new_key()
    monkeypatch.setenv("MILEPOST_SECRET_KEY", key)
    Vault.from_env(store).put("x", "postgres", DATA)
    assert Vault(store, key).get("x") == {**DATA, "type": "postgres"}
    assert Vault.from_env(store, environ={"MILEPOST_SECRET_KEY": key}).get("x") is not None


@pytest.mark.parametrize(
    "environ", [{}, {"MILEPOST_SECRET_KEY": ""}, {"MILEPOST_SECRET_KEY": " , "}]
)
def test_from_env_missing(store: FakeStore, environ: dict[str, str]) -> None:
    with pytest.raises(SecretKeyMissing) as info:
        Vault.from_env(store, environ=environ)
    assert info.value.code == "secret_key_missing"
    assert "MILEPOST_SECRET_KEY" in info.value.message
    assert "milepost secret-key" in info.value.message
    assert "Fernet.generate_key" in info.value.message


def test_from_env_missing_in_the_process_env(
    store: FakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MILEPOST_SECRET_KEY", raising=False)
    with pytest.raises(SecretKeyMissing):
        Vault.from_env(store)


@pytest.mark.parametrize(
    "value",
    ["not-a-key", "c2hvcnQ=", "x" * 44, "clé-ünïcode", "A" * 43 + "!"],
)
def test_from_env_malformed(store: FakeStore, value: str) -> None:
    with pytest.raises(SecretKeyInvalid) as info:
        Vault.from_env(store, environ={"MILEPOST_SECRET_KEY": value})
    err = info.value
    assert err.code == "secret_key_invalid"
    assert "MILEPOST_SECRET_KEY" in err.message and "Fernet key" in err.message
    assert value not in err.message


def test_malformed_second_key_is_named_by_position() -> None:
    good = new_key()
    with pytest.raises(SecretKeyInvalid, match="key 2 of 2") as info:
        parse_keys(f"{good},oops-not-a-key")
    assert good not in info.value.message and "oops" not in info.value.message


def test_repr_hides_the_key(store: FakeStore) -> None:
    key = new_key()
    assert key not in repr(Vault(store, key))
