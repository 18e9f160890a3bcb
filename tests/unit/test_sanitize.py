"""Redaction (milepost.sanitize): declared secrets, what looks like a secret, sensitive keys."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from milepost import sanitize
from milepost.sanitize import MASK, Redactor, mask_keys, mask_patterns

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFkYSJ9."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLez"
    "V6ffAt0gunVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxKLxoS2tFczGkPLPgiz"
    "\n-----END RSA PRIVATE KEY-----"
)

MASKED = [
    ("Authorization: Bearer abc.def-1234567890", "Authorization: Bearer ***"),
    (f"Authorization: Bearer {JWT}", "Authorization: Bearer ***"),
    (f"token {JWT} expired", "token *** expired"),
    ("key=sk-proj-abcdefghijklmnopqrstuvwxyz012345 ok", "key=sk-proj-*** ok"),
    ("sk-abcdefghijklmnopqrstuvwxyz012345", "sk-***"),
    ("stripe sk_live_abcdefghijklmnop1234", "stripe sk_live_***"),
    ("push with ghp_" + "a1B2" * 9 + " please", "push with ghp_*** please"),
    ("gho_" + "x" * 36, "gho_***"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github_pat_***"),
    ("slack xoxb-123456789012-abcdefABCDEF", "slack xoxb-***"),
    ("aws AKIAIOSFODNN7EXAMPLE in use", "aws AKIA*** in use"),
    (
        f"key:\n{PEM}\nend",
        "key:\n-----BEGIN RSA PRIVATE KEY-----***-----END RSA PRIVATE KEY-----\nend",
    ),
    ("dsn postgresql://app:hunter22@db:5432/sales", "dsn postgresql://app:***@db:5432/sales"),
    ("GET /cb?access_token=abcdef123&state=1", "GET /cb?access_token=***&state=1"),
    ('{"client_secret": "s3cr3t!"}', '{"client_secret": "***"}'),
    ("host=db password='hunter22' user=app", "host=db password='***' user=app"),
    # a `*` in a secret is part of it, not a sign the text was masked already
    ("dsn postgres://u:pa*ssword@h/db", "dsn postgres://u:***@h/db"),
    ('{"password": "hunter*2secret"}', '{"password": "***"}'),
    ("password=abc*defghi", "password=***"),
    ("Authorization: BEARER abc.def-1234567890", "Authorization: BEARER ***"),
    ("PGPASSWORD=hunter22 psql -h db", "PGPASSWORD=*** psql -h db"),
    ('export DB_PASSWORD="s3cret!x"', 'export DB_PASSWORD="***"'),
    ("x-api-key: abcdef123\naccept: */*", "x-api-key: ***\naccept: */*"),
    ("db:\n  password: hunter2\n  host: db", "db:\n  password: ***\n  host: db"),
    ("- client_secret: 'abc123'", "- client_secret: '***'"),
]


@pytest.mark.parametrize(("text", "expected"), MASKED, ids=[t[:24] for t, _ in MASKED])
def test_what_looks_like_a_secret_is_masked_and_the_rest_kept(text: str, expected: str) -> None:
    assert mask_patterns(text) == expected


PLAIN = [
    "connected to db.internal as etl",
    "the bearer instruments of the bank",
    "Bearer of bad news",
    "task-0123456789abcdefghijklmn finished",
    "disk-0123456789abcdefghijklmn",
    "ask-me-anything",
    hashlib.sha256(b"data").hexdigest(),
    hashlib.md5(b"data").hexdigest(),  # noqa: S324 - a hash that must pass, not a use
    str(uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0)),
    "402601968591175680",
    base64.b64encode(json.dumps({"a": 1, "b": [1, 2, 3]}).encode()).decode(),
    base64.b64encode(b"an ordinary sentence, nothing to hide here at all").decode(),
    "https://example.com/a/b?page=2&size=10",
    "mailto:ada@example.com",
    "user@host:/path",
    "PWD=/home/ada",
    "token: missing, please log in",
    "the password is required",
    '{"tokens": 12, "secretary": "Ada"}',
    "AKIA is a prefix",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n-----END PUBLIC KEY-----",
]


@pytest.mark.parametrize("text", PLAIN, ids=[t[:24] for t in PLAIN])
def test_ordinary_text_ids_hashes_and_base64_pass_unchanged(text: str) -> None:
    assert mask_patterns(text) == text


_SECRETISH = hs.sampled_from(
    [
        "Bearer ",
        "bearer ",
        "eyJ",
        ".eyJ",
        "sk-",
        "sk_live_",
        "ghp_",
        "github_pat_",
        "xoxb-",
        "AKIA",
        "AIza",
        "://",
        ":",
        "@",
        "password=",
        '"token": "',
        "PGPASSWORD=",
        "x-api-key: ",
        "password: ",
        "-----BEGIN PRIVATE KEY-----",
        "-----END PRIVATE KEY-----",
        MASK,
        "*",
        "\n",
        " ",
        ".",
    ]
)
_TEXT = hs.lists(hs.one_of(_SECRETISH, hs.text(max_size=40)), max_size=12).map("".join)


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_masking_never_lengthens_a_text_and_is_idempotent(text: str) -> None:
    once = mask_patterns(text)
    assert len(once) <= len(text)
    assert mask_patterns(once) == once


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_the_quick_check_skips_only_texts_no_pattern_matches(text: str) -> None:
    assert mask_patterns(text) == sanitize._mask_all(text)
    for example, _ in MASKED:  # every masked example, after other text, is still found
        assert mask_patterns(text + example) == sanitize._mask_all(text + example)


@pytest.mark.parametrize(
    "text",
    [
        "a." * 32000,
        "a-" * 32000,
        "sk-" * 20000,
        "a_" * 32000,
        "Bearer " * 9000,
        "a://b" * 12000,
        "x:" * 32000,
    ],
)
def test_masking_a_large_output_stays_linear(text: str) -> None:
    started = time.perf_counter()
    mask_patterns(text)
    assert time.perf_counter() - started < 0.5


def test_only_the_patterns_whose_trigger_is_in_the_text_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []

    class Spy:
        def __init__(self, triggers: tuple[str, ...], pattern: re.Pattern[str]) -> None:
            self.triggers, self.pattern = triggers, pattern

        def sub(self, replacement: str, text: str) -> str:
            ran.append(self.triggers[0])
            return self.pattern.sub(replacement, text)

    rules = [(t, Spy(t, p), r) for t, p, r in sanitize._RULES]
    monkeypatch.setattr(sanitize, "_RULES", rules)
    assert mask_patterns("a long log line: token=abc123 expired") == (
        "a long log line: token=*** expired"
    )
    assert ran and set(ran) == {"password="}  # the rules of `name=` only
    ran.clear()
    assert mask_patterns("see https://example.com/docs") == "see https://example.com/docs"
    assert ran == ["://"]
    ran.clear()
    prose = "the token and the key expired; ask the secretary. " * 2000
    assert mask_patterns(prose) == prose
    assert ran == []  # names without a sign, `key`, `ask`: no pattern can match


def test_redactor_masks_declared_values_and_patterns_in_nested_values() -> None:
    redactor = Redactor(["hunter22"])
    value = {"msg": "login hunter22", "list": ["Bearer abcdef-123456", 5, None]}
    assert redactor.value(value) == {"msg": "login ***", "list": ["Bearer ***", 5, None]}
    assert Redactor().text("Bearer abcdef-123456") == "Bearer ***"


def test_mask_keys_masks_values_under_sensitive_keys_at_any_depth() -> None:
    value = {
        "user": "ada",
        "password": "pw",
        "db": {"api_key": "k", "host": "h"},
        "items": [{"token": "t"}],
        "secret": "",
    }
    assert mask_keys(value) == {
        "user": "ada",
        "password": MASK,
        "db": {"api_key": MASK, "host": "h"},
        "items": [{"token": MASK}],
        "secret": "",
    }
