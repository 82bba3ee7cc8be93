"""The benchmarks refuse arguments they would otherwise misread."""

from __future__ import annotations

import pytest

from loadtest import bench_peers


def test_the_peers_benchmark_refuses_a_server_it_does_not_know(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # "Prometheus" (capitalised) once ran shoal by OTLP under that name
    with pytest.raises(SystemExit) as exited:
        bench_peers.main(["--servers", "prometheus,Prometheus", "--duration", "1"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "unknown server(s) 'Prometheus'" in err
    assert "victoria-metrics" in err  # the names it knows
