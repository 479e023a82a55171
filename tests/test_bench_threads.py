"""bench/bench_threads.py empties only the folders it wrote itself, and refuses before any
work a folder of another's in its place."""

from __future__ import annotations

import pytest

from bench.bench_threads import run_folders


def test_a_folder_the_benchmark_did_not_write_is_refused(tmp_path):
    (tmp_path / "idle_1").mkdir()
    (tmp_path / "idle_1" / "notes.txt").write_text("a user's file")
    with pytest.raises(SystemExit, match="idle_1: not a folder this benchmark wrote"):
        run_folders(tmp_path, 2)
    assert (tmp_path / "idle_1" / "notes.txt").exists()


def test_its_own_folders_are_named_once_per_setting_and_thread_count(tmp_path):
    (tmp_path / "one_2").mkdir()
    (tmp_path / "one_2" / "03.log").write_text("an earlier run of this benchmark")
    folders = run_folders(tmp_path, 2)
    assert sorted(p.name for p in folders.values()) == ["idle_1", "idle_2", "one_1", "one_2"]
    assert folders["one core busy", 2] == tmp_path / "one_2"
