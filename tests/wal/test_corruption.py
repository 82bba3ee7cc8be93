"""Torn tails, mid-log corruption, and what open, replay and verify make of them."""

from __future__ import annotations

import logging
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.cli import main as cli_main
from shoal.errors import WalCorruptionError
from shoal.wal import InMemoryWalMetrics, Wal, inspect_directory
from shoal.wal.codec import FRAME_HEADER_SIZE, SEGMENT_HEADER_SIZE, encode_frame
from tests.wal.helpers import frame_offsets, payload_for, replay_all, segments, write_log

PAYLOADS = [payload_for(i, 40 + i) for i in range(12)]


def _verify(directory: Path) -> int:
    return cli_main(["wal", "verify", str(directory)])


def _one_segment_log(directory: Path) -> Path:
    write_log(directory, PAYLOADS)
    (seg,) = segments(directory)
    return seg


def test_tail_cut_at_every_byte_of_the_last_record(tmp_path: Path) -> None:
    pristine = tmp_path / "pristine"
    seg = _one_segment_log(pristine)
    raw = seg.read_bytes()
    last_start = frame_offsets(PAYLOADS)[-1]
    assert len(raw) == last_start + FRAME_HEADER_SIZE + len(PAYLOADS[-1])
    for cut in range(last_start, len(raw)):
        work = tmp_path / f"cut{cut}"
        work.mkdir()
        (work / seg.name).write_bytes(raw[:cut])
        assert _verify(work) == 0
        metrics = InMemoryWalMetrics()
        got, wal = replay_all(work, metrics=metrics)
        try:
            assert got == [(i + 1, p) for i, p in enumerate(PAYLOADS[:-1])]
            report = wal.recovery_report
            assert report.clean
            assert len(report.torn_tails_cut) == (1 if cut > last_start else 0)
            assert len(metrics.torn_tails) == (1 if cut > last_start else 0)
            assert (work / seg.name).stat().st_size == last_start  # cut on open
            assert wal.append(b"again").result(timeout=10) == len(PAYLOADS)
        finally:
            wal.shutdown(10)
        assert not list(work.glob("*.broken"))


@pytest.mark.parametrize("zeros", [1, 16, 17, 100, 4096])
def test_zero_filled_tail_is_cut(tmp_path: Path, zeros: int) -> None:
    seg = _one_segment_log(tmp_path)
    with seg.open("ab") as fh:
        fh.write(bytes(zeros))
    got, wal = replay_all(tmp_path)
    try:
        assert got == [(i + 1, p) for i, p in enumerate(PAYLOADS)]
        (torn,) = wal.recovery_report.torn_tails_cut
        assert torn.size - torn.valid_end == zeros
        assert wal.append(b"next").result(timeout=10) == len(PAYLOADS) + 1
    finally:
        wal.shutdown(10)


def test_last_record_zeroed_in_place_is_a_torn_tail(tmp_path: Path) -> None:
    seg = _one_segment_log(tmp_path)
    raw = bytearray(seg.read_bytes())
    start = frame_offsets(PAYLOADS)[-1]
    raw[start:] = bytes(len(raw) - start)
    seg.write_bytes(bytes(raw))
    got, wal = replay_all(tmp_path)
    wal.shutdown(10)
    assert [lsn for lsn, _ in got] == list(range(1, len(PAYLOADS)))
    assert wal.recovery_report.clean


def _damage(seg: Path, offset: int, mutate: bytes | None = None, xor: int = 0) -> bytes:
    raw = bytearray(seg.read_bytes())
    if mutate is not None:
        raw[offset : offset + len(mutate)] = mutate
    else:
        raw[offset] ^= xor
    seg.write_bytes(bytes(raw))
    return bytes(raw)


@pytest.mark.parametrize(
    ("where", "change"),
    [
        ("payload", None),
        ("crc", None),
        ("length", struct.pack("<I", 2**31)),
        ("length", struct.pack("<I", 7)),
        ("lsn", None),
        ("type", None),
    ],
)
def test_one_bad_frame_mid_log_is_reported_and_kept_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str, change: bytes | None
) -> None:
    seg = _one_segment_log(tmp_path)
    victim = 4  # record LSN 5
    start = frame_offsets(PAYLOADS)[victim]
    offset = {"length": 0, "crc": 4, "lsn": 8, "type": 16, "payload": 20}[where] + start
    damaged = _damage(seg, offset, change, xor=0x08)
    assert _verify(tmp_path) == 1
    metrics = InMemoryWalMetrics()
    with caplog.at_level(logging.ERROR, logger="shoal.wal"):
        got, wal = replay_all(tmp_path, metrics=metrics)
    try:
        assert got == [(i + 1, p) for i, p in enumerate(PAYLOADS[:victim])]
        report = wal.recovery_report
        (bad,) = report.damaged
        assert bad.valid_end == start and bad.records == victim
        assert bad.after_records == len(PAYLOADS) - victim - 1
        broken = seg.with_name(seg.name + ".broken")
        assert report.broken_copies == (broken,)
        assert broken.read_bytes() == damaged
        assert metrics.corruptions and metrics.corruptions[0][0] == seg.name
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert any(seg.name in r.getMessage() for r in errors)
        # LSNs never go back, not even below records that replay skipped
        new_lsn = wal.append(b"new").result(timeout=10)
        assert new_lsn > len(PAYLOADS)
    finally:
        wal.shutdown(10)
    # The damaged segment stays in place (reported on every open) until
    # truncation passes it; the new record lives in a new segment.
    got, wal = replay_all(tmp_path)
    try:
        assert [lsn for lsn, _ in got] == [1, 2, 3, 4, new_lsn]
        assert len(wal.recovery_report.damaged) == 1
        assert wal.truncate_before(new_lsn) == 1
    finally:
        wal.shutdown(10)
    assert _verify(tmp_path) == 0
    assert broken.exists()


def _three_segment_log(directory: Path) -> list[Path]:
    payloads = [payload_for(i, 900) for i in range(12)]
    write_log(directory, payloads, segment_bytes=4096)
    files = segments(directory)
    assert len(files) == 3  # 4 records of 917 bytes per segment
    return files


def test_skip_segment_policy_continues_with_the_next_segment(tmp_path: Path) -> None:
    files = _three_segment_log(tmp_path)
    _damage(files[0], SEGMENT_HEADER_SIZE + 917 + 100, xor=0x01)  # record 2
    got, wal = replay_all(tmp_path, segment_bytes=4096)
    try:
        assert [lsn for lsn, _ in got] == [1, *range(5, 13)]
        assert wal.append(b"more").result(timeout=10) == 13  # damage was not in the last segment
    finally:
        wal.shutdown(10)


def test_stop_policy_replays_nothing_after_the_damage_and_refuses_appends(tmp_path: Path) -> None:
    files = _three_segment_log(tmp_path)
    _damage(files[1], SEGMENT_HEADER_SIZE + 917 + 100, xor=0x01)  # record 6
    got, wal = replay_all(tmp_path, segment_bytes=4096, corruption_policy="stop")
    try:
        assert [lsn for lsn, _ in got] == [1, 2, 3, 4, 5]
        assert wal.recovery_report.stopped_after_lsn == 5
        with pytest.raises(WalCorruptionError) as info:
            wal.append(b"x")
        assert info.value.segment == files[1].name
    finally:
        wal.shutdown(10)
    assert files[1].with_name(files[1].name + ".broken").exists()


def test_a_log_that_stopped_at_damage_is_not_retired(tmp_path: Path) -> None:
    # The records after the damage were never replayed, so nothing committed them.
    files = _three_segment_log(tmp_path)
    _damage(files[1], SEGMENT_HEADER_SIZE + 917 + 100, xor=0x01)  # record 6
    before = [f.read_bytes() for f in files]
    wal = Wal.open(tmp_path, segment_bytes=4096, corruption_policy="stop")
    wal.shutdown(10, retire=True)
    assert [f.read_bytes() for f in segments(tmp_path)] == before


def test_bad_header_in_a_middle_segment_is_damage(tmp_path: Path) -> None:
    files = _three_segment_log(tmp_path)
    _damage(files[1], 0, b"NOTAWAL!")
    assert _verify(tmp_path) == 1
    got, wal = replay_all(tmp_path, segment_bytes=4096)
    wal.shutdown(10)
    assert [lsn for lsn, _ in got] == [1, 2, 3, 4, *range(9, 13)]
    (bad,) = wal.recovery_report.damaged
    assert bad.path == files[1] and "header" in (bad.reason or "")


def test_a_missing_middle_segment_is_damage(tmp_path: Path) -> None:
    files = _three_segment_log(tmp_path)
    files[1].unlink()
    assert _verify(tmp_path) == 1
    got, wal = replay_all(tmp_path, segment_bytes=4096)
    wal.shutdown(10)
    assert [lsn for lsn, _ in got] == [1, 2, 3, 4, *range(9, 13)]
    (bad,) = wal.recovery_report.damaged
    assert bad.path == files[2] and "missing" in (bad.reason or "")


def test_torn_tail_in_an_earlier_segment_is_benign_only_if_nothing_is_missing(
    tmp_path: Path,
) -> None:
    files = _three_segment_log(tmp_path)
    # Junk after the last complete frame of segment 1 (a write that could not
    # be cut back before the writer rotated): nothing missing, torn tail.
    with files[0].open("ab") as fh:
        fh.write(encode_frame(5, 1, b"partial")[:11])
    assert _verify(tmp_path) == 0
    got, wal = replay_all(tmp_path, segment_bytes=4096)
    wal.shutdown(10)
    assert [lsn for lsn, _ in got] == list(range(1, 13))
    assert len(wal.recovery_report.torn_tails_cut) == 1
    # Cutting into segment 1's last record loses an acknowledged record: damage.
    with files[0].open("r+b") as fh:
        fh.truncate(files[0].stat().st_size - 5)
    assert _verify(tmp_path) == 1
    got, wal = replay_all(tmp_path, segment_bytes=4096)
    wal.shutdown(10)
    assert [lsn for lsn, _ in got] == [1, 2, 3, *range(5, 13)]
    assert len(wal.recovery_report.damaged) == 1


def test_unknown_record_types_are_replayed_not_dropped(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path)
    for rtype in (1, 0xEE, 255, 7):
        wal.append(bytes([rtype]) * 3, rtype=rtype).result(timeout=10)
    wal.shutdown(10)
    wal = Wal.open(tmp_path)
    try:
        assert [(r.rtype, r.payload) for r in wal.replay()] == [
            (t, bytes([t]) * 3) for t in (1, 0xEE, 255, 7)
        ]
        assert wal.recovery_report.clean
    finally:
        wal.shutdown(10)


def test_reserved_record_type_zero_mid_log_is_damage(tmp_path: Path) -> None:
    seg = _one_segment_log(tmp_path)
    raw = bytearray(seg.read_bytes())
    start = frame_offsets(PAYLOADS)[3]
    forged = encode_frame(4, 0, PAYLOADS[3])  # valid checksum, reserved type
    raw[start : start + len(forged)] = forged
    seg.write_bytes(bytes(raw))
    got, wal = replay_all(tmp_path)
    wal.shutdown(10)
    assert [lsn for lsn, _ in got] == [1, 2, 3]
    (bad,) = wal.recovery_report.damaged
    assert "type 0" in (bad.reason or "")


def test_verify_accepts_a_data_dir_and_reports_ranges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wal_dir = tmp_path / "wal"
    write_log(wal_dir, PAYLOADS)
    assert _verify(tmp_path) == 0
    out = capsys.readouterr().out
    assert f"1..{len(PAYLOADS)}" in out and " ok" in out
    assert _verify(tmp_path / "nope") == 2  # not a directory: an error, not "clean"


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    sizes=st.lists(st.integers(0, 700), min_size=1, max_size=25),
    data=st.data(),
    policy=st.sampled_from(["skip-segment", "stop"]),
)
def test_random_corruption_of_random_logs(
    sizes: list[int], data: st.DataObject, policy: str
) -> None:
    """Whatever happens to the bytes: open never raises, replay returns only
    original records in LSN order, every record before the first damaged byte
    survives, and new appends get fresh LSNs."""
    payloads = [payload_for(i, n) for i, n in enumerate(sizes)]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        write_log(directory, payloads, segment_bytes=4096)
        files = segments(directory)
        victim = data.draw(st.sampled_from(files))
        raw = bytearray(victim.read_bytes())
        start = data.draw(st.integers(0, len(raw) - 1))
        kind = data.draw(st.sampled_from(["flip", "junk", "zero", "truncate"]))
        if kind == "flip":
            raw[start] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "junk":
            junk = data.draw(st.binary(min_size=1, max_size=64))
            raw[start : start + len(junk)] = junk
        elif kind == "zero":
            raw[start:] = bytes(len(raw) - start)
        else:
            del raw[start:]
        victim.write_bytes(bytes(raw))
        before = [p for p in files if p.name < victim.name]
        # records wholly before the damage: earlier segments, plus frames of
        # the victim that end before the first changed byte
        intact = 0
        for p in before:
            intact += sum(1 for _ in _lsns_in(p))
        first_in_victim = int(victim.name[:20])
        offset = SEGMENT_HEADER_SIZE
        for lsn in range(first_in_victim, len(payloads) + 1):
            end = offset + FRAME_HEADER_SIZE + len(payloads[lsn - 1])
            if end > start:
                break
            intact += 1
            offset = end
        assert inspect_directory(directory, 1 << 20) is not None
        wal = Wal.open(directory, segment_bytes=4096, corruption_policy=policy)
        try:
            got = [(r.lsn, r.payload) for r in wal.replay()]
            lsns = [lsn for lsn, _ in got]
            assert lsns == sorted(set(lsns))
            for lsn, payload in got:
                assert payload == payloads[lsn - 1]
            assert lsns[:intact] == list(range(1, intact + 1))
            if wal.recovery_report.clean or policy == "skip-segment":
                new_lsn = wal.append(b"z").result(timeout=10)
                assert new_lsn > max(lsns, default=0)
                if victim != files[-1]:
                    assert new_lsn > len(payloads)
        finally:
            wal.shutdown(10)


def _lsns_in(path: Path) -> list[int]:
    from shoal.wal.codec import FrameScanner

    raw = path.read_bytes()
    return [f[0] for f in FrameScanner(raw, SEGMENT_HEADER_SIZE, int(path.name[:20]), 1 << 20)]


def test_broken_copy_is_made_once(tmp_path: Path) -> None:
    seg = _one_segment_log(tmp_path)
    _damage(seg, frame_offsets(PAYLOADS)[2] + 20, xor=0x40)
    for _ in range(2):
        _got, wal = replay_all(tmp_path)
        wal.shutdown(10)
    assert sorted(p.name for p in tmp_path.iterdir() if "broken" in p.name) == [
        seg.name + ".broken"
    ]
    shutil.rmtree(tmp_path)
