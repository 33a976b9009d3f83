"""A failed download and a package that is not installed are not failed migrations.

Without --synthetic-data, a run that cannot fetch what it downloads gives the verdict needs-data
(exit 3, "needs data: URL (or run with --synthetic-data)"), in scripts and notebooks; a run that
imports a package not installed here gives the verdict error (exit 2) naming the package. A module
of the project that an import no longer finds, and a real placement bug in a script that also
downloads, still fail. The fixtures fetch from 127.0.0.1:9, where nothing listens: the fetch fails
at once, with or without a network.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cpu2gpu.runtime.causes import downloads, missingpkg

pytestmark = pytest.mark.runtime
HERE = Path(__file__).resolve().parents[2] / "fixtures" / "runtime" / "downloads"
CLOSED = "http://127.0.0.1:9/data/train.csv"  # nothing listens on the discard port


def _raised(fn):
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - the exception is what is tested
        return e
    raise AssertionError("nothing raised")


# --- which failures are downloads (in process, no torch) --------------------------------------

def test_a_refused_urlopen_is_a_download_of_its_url():
    found = downloads.find(_raised(lambda: urllib.request.urlopen(CLOSED, timeout=5)))
    assert found["path"] == CLOSED and found["download"] and not found["is_path"]
    assert "Connection refused" in found["what"]


def test_an_http_error_status_is_a_download_of_its_url():
    error = urllib.error.HTTPError("https://example.org/mnist.gz", 404, "Not Found", {}, None)
    found = downloads.find(error)
    assert found["path"] == "https://example.org/mnist.gz" and "404" in found["what"]


def test_a_refused_socket_is_a_download_of_its_address():
    found = downloads.find(_raised(lambda: socket.create_connection(("127.0.0.1", 9), timeout=5)))
    assert found["path"] == "127.0.0.1:9"


def test_an_http_library_error_is_a_download_of_its_request_url():
    # requests is not installed here: a class of that module and name stands for its ConnectionError
    error_class = type("ConnectionError", (OSError,), {"__module__": "requests.exceptions"})
    error = error_class("Max retries exceeded")
    error.request = type("PreparedRequest", (), {"url": "https://huggingface.co/x/resolve/main/a.bin"})()
    assert downloads.find(error)["path"] == "https://huggingface.co/x/resolve/main/a.bin"


def test_a_librarys_own_error_after_its_fetch_failed_is_a_download():
    # torchvision's MNIST tries its mirrors, then raises outside the except block: no chained cause
    def download():
        for mirror in ("http://127.0.0.1:9/mnist/",):
            url = f"{mirror}train-images-idx3-ubyte.gz"  # noqa: F841 - found in the frame
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz")

    assert downloads.find(_raised(download))["path"] == "http://127.0.0.1:9/mnist/train-images-idx3-ubyte.gz"


def test_a_download_whose_cache_the_isolation_refuses_is_a_download(tmp_path):
    """Landlock refuses ~/.cache/torch/hub: the fetch's frame names the URL it was saving."""
    cache = tmp_path / "hub"
    cache.mkdir()

    def fetch(url="http://127.0.0.1:9/checkpoints/w.pth"):
        raise PermissionError(13, "Permission denied", str(cache / "w.pth.0a1b.partial"))

    found = downloads.find(_raised(fetch))
    assert found["path"] == "http://127.0.0.1:9/checkpoints/w.pth" and found["download"]
    assert f"{cache} is outside the run's copy" in found["what"]


def test_a_refused_write_with_no_fetch_is_not_a_download(tmp_path):
    def save(path=str(tmp_path / "out.txt")):
        raise PermissionError(13, "Permission denied", path)

    assert downloads.find(_raised(save)) is None


def test_a_bug_in_the_fallback_of_a_failed_fetch_is_not_a_download():
    def fallback():
        try:
            urllib.request.urlopen(CLOSED, timeout=5)
        except urllib.error.URLError:
            raise RuntimeError("Expected all tensors to be on the same device")

    assert downloads.find(_raised(fallback)) is None


def test_a_broken_pipe_that_no_fetch_shows_is_not_a_download():
    assert downloads.find(ConnectionResetError(104, "Connection reset by peer")) is None
    assert downloads.find(TimeoutError("the worker did not answer")) is None
    assert downloads.find(RuntimeError("Expected all tensors to be on the same device")) is None


def test_a_closed_http_connection_is_a_download():
    assert downloads.find(http.client.RemoteDisconnected("Remote end closed connection")) is not None


# --- which ModuleNotFoundErrors are packages not installed (in process) ------------------------

def test_a_package_that_is_not_installed_is_missing(tmp_path):
    found = missingpkg.find(_raised(lambda: __import__("some_missing_pkg_xyz")), str(tmp_path))
    assert found == {"name": "some_missing_pkg_xyz", "pip": "some_missing_pkg_xyz"}


def test_the_pip_name_is_the_distributions(tmp_path):
    error = ModuleNotFoundError("No module named 'cv2'", name="cv2")
    if missingpkg.find(error, str(tmp_path)) is not None:  # OpenCV may be installed where this runs
        assert missingpkg.find(error, str(tmp_path))["pip"] == "opencv-python"


def test_a_module_of_the_project_is_not_a_missing_package(tmp_path):
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "train_utils.py").write_text("")
    error = ModuleNotFoundError("No module named 'train_utils'", name="train_utils")
    assert missingpkg.find(error, str(tmp_path)) is None


def test_a_submodule_missing_from_an_installed_package_is_not_a_missing_package(tmp_path):
    error = ModuleNotFoundError("No module named 'json.nothing'", name="json.nothing")
    assert missingpkg.find(error, str(tmp_path)) is None


def test_a_bug_while_handling_an_optional_import_is_not_a_missing_package(tmp_path):
    def optional():
        try:
            import some_missing_pkg_xyz  # noqa: F401
        except ImportError:
            raise RuntimeError("Expected all tensors to be on the same device")

    assert missingpkg.find(_raised(optional), str(tmp_path)) is None


# --- verify, end to end (children on the simulated device) -------------------------------------

def _verify(cli, name: str, *extra: str, fmt: str = "text"):
    code, out, err = cli("verify", str(HERE / name), "-q", "--output-format", fmt, *extra)
    return code, (json.loads(out) if fmt == "json" else out), err


def test_a_failed_urlretrieve_needs_data(cli):
    code, out, err = _verify(cli, "download_urlretrieve.py", "--device", "sim")
    assert code == 3, (out, err)
    assert "verdict: NEEDS DATA" in out and "FAIL" not in out
    assert "needs data: http://127.0.0.1:9/datasets/iris.csv (or run with --synthetic-data)" in out
    assert "download_urlretrieve.py:14" in out


@pytest.mark.slow  # a verify child each; the default tier keeps one download and one missing package
def test_a_failed_hub_download_needs_data_in_json(cli):
    code, data, err = _verify(cli, "download_hub.py", "--device", "sim", fmt="json")
    assert code == 3, (data, err)
    assert data["verdict"] == "needs-data"
    (needed,) = data["needs_data"]
    assert needed["path"] == "http://127.0.0.1:9/checkpoints/linear-0123abcd.pth" and needed["download"]
    assert needed["where"]["file"].endswith("download_hub.py") and needed["where"]["line"] == 11
    assert data["runs"][0]["status"] == "needs_data"
    assert data["reasons"][0]["cause"] == ("needs data: http://127.0.0.1:9/checkpoints/linear-0123abcd.pth "
                                           "(or run with --synthetic-data)")


@pytest.mark.slow  # a verify child each; the default tier keeps one download and one missing package
def test_a_sys_exit_after_a_failed_download_needs_data(cli):
    code, out, err = _verify(cli, "download_exits.py", "--device", "sim")
    assert code == 3, (out, err)
    assert "needs data: http://127.0.0.1:9/data/train.npz" in out and "download_exits.py:13" in out


@pytest.mark.slow  # a verify child each; the default tier keeps one download and one missing package
def test_a_notebook_that_downloads_needs_data(cli):
    code, out, err = _verify(cli, "download_notebook.ipynb", "--device", "sim")
    assert code == 3, (out, err)
    assert "needs data: http://127.0.0.1:9/datasets/points.csv (or run with --synthetic-data)" in out
    assert "download_notebook.ipynb:cell 2:2" in out


@pytest.mark.slow  # a verify child each; the default tier keeps one download and one missing package
def test_the_original_and_the_migrated_runs_that_download_need_data(cli):
    code, data, err = _verify(cli, "download_urlretrieve.py", "--against", str(HERE / "download_urlretrieve.py"),
                              "--synthetic-data", fmt="json")
    assert code == 3, (data, err)
    (needed,) = data["needs_data"]
    assert needed["runs"] == ["original (cpu)", "migrated (sim)", "migrated (cpu)"]
    assert "--synthetic-data" not in data["reasons"][0]["cause"]  # it is on: the hint would not help


@pytest.mark.slow  # a verify child each; the default tier keeps one download and one missing package
@pytest.mark.parametrize("name, line", [("missing_package.py", 3), ("missing_package_late.py", 9)])
def test_a_package_that_is_not_installed_is_an_error_naming_it(cli, name, line):
    code, out, err = _verify(cli, name, "--device", "sim")
    assert code == 2, (out, err)
    pkg = "some_missing_pkg_xyz" if name == "missing_package.py" else "another_missing_pkg_xyz"
    assert "verdict: ERROR — a package the script imports is not installed here" in out
    assert f"the script imports `{pkg}`, which is not installed here (pip install {pkg}) at " in out
    assert f"{name}:{line}\n" in out
    assert "FAIL" not in out


def test_a_package_that_is_not_installed_in_json(cli):
    code, data, err = _verify(cli, "missing_package.py", "--device", "sim", fmt="json")
    assert code == 2, (data, err)
    assert data["verdict"] == "error"
    (reason,) = data["reasons"]
    assert reason["missing_package"] == "some_missing_pkg_xyz" and reason["rule"] is None
    assert data["runs"][0]["missing_package"]["name"] == "some_missing_pkg_xyz"


@pytest.mark.slow  # a verify child each; the default tier keeps one download and one missing package
def test_a_project_module_an_import_no_longer_finds_still_fails(cli):
    code, out, err = _verify(cli, "migration_broke_import.py", "--device", "sim")
    assert code == 1, (out, err)
    assert "verdict: FAIL" in out and "ModuleNotFoundError: No module named 'train_utils'" in out


@pytest.mark.slow  # a verify child each; the default tier keeps one download and one missing package
def test_a_placement_bug_after_a_guarded_download_still_fails(cli):
    code, out, err = _verify(cli, "cpu_left_after_download_fallback.py", "--device", "sim")
    assert code == 1, (out, err)
    assert "verdict: FAIL" in out and "needs data" not in out


# --- migrate: cannot be judged here, not a failed migration -----------------------------------

@pytest.mark.slow  # a verify child each; the default tier keeps one download and one missing package
@pytest.mark.parametrize("name, why", [
    ("download_urlretrieve.py", "needs data: http://127.0.0.1:9/datasets/iris.csv (or run with --synthetic-data)"),
    ("missing_package.py", "the script imports `some_missing_pkg_xyz`, which is not installed here"),
])
def test_migrate_says_it_cannot_judge_a_download_or_a_missing_package(cli, tmp_path, name, why):
    shutil.copy(HERE / name, tmp_path / name)
    code, out, err = cli("migrate", str(tmp_path / name), "-q", "--max-rounds", "0", "--device", "sim",
                         "--output-format", "json")
    assert code == 3, (out, err)
    data = json.loads(out)
    assert not data["proven"] and data["cannot_run"].startswith(why)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
