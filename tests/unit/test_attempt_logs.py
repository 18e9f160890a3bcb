"""`core.logs`: a stream kept within its cap (head and tail, the cut counted), whatever
the size of the writes; pieces already cut are not cut again."""

from __future__ import annotations

from milepost.core import logs


def test_a_stream_within_its_cap_is_kept_whole() -> None:
    sink = logs.Capped(300)
    for part in ("a" * 100, "é" * 50, "b" * 99):  # 100 + 100 + 99 bytes
        sink.write(part)
    assert sink.value() == logs.Captured("", "a" * 100 + "é" * 50 + "b" * 99, 0)
    assert logs.Capped(300).value() is None


def test_past_its_cap_the_head_and_the_tail_are_kept_and_the_cut_counted() -> None:
    sink = logs.Capped(256)
    sink.write("H" * 200)
    for _ in range(1000):  # many small writes: the tail is trimmed now and then
        sink.write("m" * 9)
    sink.write("T" * 128)
    found = sink.value()
    assert found is not None
    seam = 32  # dropped beside the cut, on each side: a quarter of each half
    assert found.cut == 200 + 9000 + 128 - 256 + 2 * seam
    assert found.text == "H" * (128 - seam) + logs.marker(found.cut) + "T" * (128 - seam)


def test_a_cut_splitting_a_character_drops_its_pieces() -> None:
    sink = logs.Capped(256)
    sink.write("é" * 1000)  # 2000 bytes; the halves end on character boundaries
    sink.write("x")  # the tail now starts in the middle of an é
    found = sink.value()
    assert found is not None and found.cut == 2001 - 256 + 2 * 32
    head, _, tail = found.text.partition(logs.marker(found.cut))
    assert head == "é" * 48 and tail == "é" * 47 + "x"


def test_pieces_join_and_a_piece_cut_already_is_not_cut_again() -> None:
    first = logs.Capped(256)
    first.write("a" * 1000)
    cut = first.value()
    assert cut is not None
    again = logs.capped("stdout", [cut], 256)
    assert again == logs.Captured("stdout", cut.text, cut.cut)
    joined = logs.capped("stderr", [logs.Captured("stderr", "one\n"), "two\n"], 256)
    assert joined == logs.Captured("stderr", "one\ntwo\n", 0)
    assert logs.capped("stdout", ["", ""], 256) is None


def test_a_secret_split_by_the_cut_leaves_nothing_of_itself() -> None:
    """The python tool's worker cuts before the runner redacts: the pieces of a secret on
    either side of the cut would be recognised by no redaction, so the seam goes too."""
    secret = "sk-" + "q7" * 14  # 31 characters
    pieces = {secret[i:j] for i in range(len(secret)) for j in range(i + 4, len(secret) + 1)}
    for k in range(1, len(secret)):  # every split: the head ends, or the tail starts, in it
        for text in (
            "h" * (128 - k) + secret + "m" * 2000,
            "h" * 200 + "m" * 1000 + secret + "t" * (128 + k - len(secret)),
        ):
            sink = logs.Capped(256)
            sink.write(text)
            found = sink.value()
            assert found is not None and found.cut
            assert not [p for p in pieces if p in found.text], (k, found.text)
