import os
from pathlib import Path

import pytest

from flows import prefect_env


def test_fresh_machine_gets_a_prefect_home_with_its_parents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_HOME", raising=False)
    monkeypatch.setenv("SPECWATCH_HOME", str(tmp_path / "never" / "made"))
    prefect_env.configure()
    assert Path(os.environ["PREFECT_HOME"]) == tmp_path / "never" / "made" / "prefect"
    assert (tmp_path / "never" / "made" / "prefect").is_dir()


def test_user_settings_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "mine"))
    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "true")
    prefect_env.configure()
    assert os.environ["PREFECT_HOME"] == str(tmp_path / "mine")
    assert os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "true"
