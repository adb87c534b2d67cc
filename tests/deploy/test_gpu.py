"""deploy.gpu against a fake nvidia-smi: a real executable on PATH printing canned output."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from deploy.gpu import (
    POWER_QUERY,
    GpuError,
    GpuPower,
    PowerCappedError,
    check_power_limits,
    parse_gpu_list,
    parse_power_csv,
)

FULL_POWER = "0, 600.00, 600.00\n1, 600.00, 600.00\n2, 600.00, 600.00\n3, 600.00, 600.00\n"
TWO_CAPPED = "0, 600.00, 600.00\n1, 400.00, 600.00\n2, 600.00, 600.00\n3, 450.00, 600.00\n"


def fake_smi(directory: Path, stdout: str, exit_code: int = 0) -> Path:
    """Write an executable `nvidia-smi` that records its argv and prints `stdout`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "out.txt").write_text(stdout)
    script = directory / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > "{directory}/argv.txt"\n'
        f'cat "{directory}/out.txt"\n'
        f'[ {exit_code} -eq 0 ] || echo "NVIDIA-SMI has failed" >&2\n'
        f"exit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def install(stdout: str, exit_code: int = 0) -> Path:
        script = fake_smi(tmp_path / "bin", stdout, exit_code)
        monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
        return script

    return install


def test_full_power_host_passes_and_queries_the_right_fields(on_path):
    script = on_path(FULL_POWER)
    gpus = check_power_limits()
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert all(g.limit_w == 600.0 and not g.capped for g in gpus)
    argv = (script.parent / "argv.txt").read_text().split()
    assert argv == list(POWER_QUERY)


def test_capped_gpus_are_refused_and_listed(on_path):
    on_path(TWO_CAPPED)
    with pytest.raises(PowerCappedError) as info:
        check_power_limits()
    assert [g.index for g in info.value.capped] == [1, 3]
    message = str(info.value)
    assert "GPU 1: 400 W of 600 W max" in message and "GPU 3: 450 W" in message
    assert "GPU 0" not in message


def test_allow_power_capped_returns_them_marked(on_path):
    on_path(TWO_CAPPED)
    gpus = check_power_limits(allow_power_capped=True)
    assert [g.capped for g in gpus] == [False, True, False, True]


def test_only_the_requested_gpus_are_checked(on_path):
    on_path(TWO_CAPPED)
    assert [g.index for g in check_power_limits(parse_gpu_list("0,2"))] == [0, 2]
    with pytest.raises(PowerCappedError):
        check_power_limits(parse_gpu_list("2,3"))
    with pytest.raises(GpuError, match="not found"):
        check_power_limits([0, 7])


def test_executable_path_is_injectable(tmp_path: Path):
    script = fake_smi(tmp_path / "elsewhere", TWO_CAPPED)
    with pytest.raises(PowerCappedError):
        check_power_limits(nvidia_smi=str(script))


def test_failing_or_missing_nvidia_smi_is_a_clear_error(tmp_path: Path):
    script = fake_smi(tmp_path / "bin", "", exit_code=9)
    with pytest.raises(GpuError, match="exited 9: NVIDIA-SMI has failed"):
        check_power_limits(nvidia_smi=str(script))
    with pytest.raises(GpuError, match="could not run"):
        check_power_limits(nvidia_smi=str(tmp_path / "no-such-smi"))


def test_not_available_fields_are_unknown_not_capped():
    gpus = parse_power_csv("0, [N/A], [N/A]\n1, 300.00, 575.00\n")
    assert gpus == [GpuPower(0, None, None), GpuPower(1, 300.0, 575.0)]
    assert [g.capped for g in gpus] == [False, True]


def test_rounding_noise_is_not_a_cap():
    assert not GpuPower(0, 599.99, 600.0).capped
    assert GpuPower(0, 599.0, 600.0).capped


@pytest.mark.parametrize("bad", ["0, 600.00", "x, 1, 2", "0, lots, 600"])
def test_unreadable_output_is_an_error(bad: str):
    with pytest.raises(GpuError):
        parse_power_csv(bad)


def test_gpu_list_parsing():
    assert parse_gpu_list("0,1,2,3") == (0, 1, 2, 3)
    assert parse_gpu_list(" 3, 1 ") == (3, 1)
    for bad in ["", "0,,1", "-1", "a", "0,0", "1.5"]:
        with pytest.raises(GpuError):
            parse_gpu_list(bad)
