"""The peers benchmark judges shoal by its ingest targets, repetition by repetition."""

from __future__ import annotations

from loadtest.bench_peers import targets


def _run(rate: float, p99: float = 30.0, rss: float = 400.0) -> dict[str, float]:
    return {"samples/s": rate, "ack p99 ms": p99, "peak RSS MB": rss}


def test_rates_are_compared_with_prometheus_in_the_same_repetition() -> None:
    # Prometheus' rate swings with the machine between repetitions; shoal's ratio in
    # each is 1.1x, while its median over Prometheus' median would be under 1.0x
    results = {
        "prometheus": [_run(400_000), _run(700_000), _run(420_000)],
        "shoal (remote write)": [_run(440_000), _run(770_000), _run(462_000)],
        "shoal (OTLP)": [_run(300_000), _run(490_000), _run(300_000, rss=640)],
    }
    got = {what: (measured, met) for what, measured, met in targets(results)}
    rate = got["shoal (remote write): at least 1.0x Prometheus' samples/s"]
    assert rate == ("1.10x (runs 1.10x, 1.10x, 1.10x)", True)
    otlp = got["shoal (OTLP): at least 0.8x Prometheus' samples/s"]
    assert otlp == ("0.71x (runs 0.75x, 0.70x, 0.71x)", False)
    assert got["shoal (remote write): ack p99 at most Prometheus'"] == (
        "30.0 against 30.0 ms",
        True,
    )
    # one run over the memory target is a miss
    assert got["shoal (OTLP): peak RSS under 600 MB"] == ("640 MB", False)
    assert got["shoal (remote write): peak RSS under 600 MB"] == ("400 MB", True)
    assert "shoal (OTLP): ack p99 at most Prometheus'" not in got


def test_a_slower_ack_p99_than_prometheus_misses_its_target() -> None:
    results = {
        "prometheus": [_run(500_000, p99=34.2)],
        "shoal (remote write)": [_run(600_000, p99=37.8)],
    }
    got = {what: (measured, met) for what, measured, met in targets(results)}
    assert got["shoal (remote write): ack p99 at most Prometheus'"] == (
        "37.8 against 34.2 ms",
        False,
    )


def test_without_prometheus_there_is_nothing_to_judge() -> None:
    assert targets({"shoal (remote write)": [_run(500_000)]}) == []
