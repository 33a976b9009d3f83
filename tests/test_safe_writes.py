"""`rewrite --in-place` never loses a byte: encodings, line endings, modes, odd files, signals."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cpu2gpu import rewrite_source
from cpu2gpu.sources.writing import TEMP_SUFFIX, WriteError, write_atomic, write_rewrite

from .conftest import HANG_GUARD_S, ROOT

CPU_SCRIPT = "import torch\nmodel = torch.nn.Linear(1, 1)\nmodel(torch.ones(1))\n"
REWRITTEN = rewrite_source(CPU_SCRIPT)


def no_temp_files(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if p.name.endswith(TEMP_SUFFIX)]


def test_plain_rewrite_in_place(cli, tmp_path):
    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT)
    code, _, err = cli("rewrite", "--in-place", str(path))
    assert code == 0 and f"Rewrote {path}" in err
    assert path.read_text() == REWRITTEN
    assert no_temp_files(tmp_path)


@pytest.mark.parametrize("prefix, encoding", [
    (b"\xef\xbb\xbf", "utf-8"),  # BOM
    (b"# -*- coding: latin-1 -*-\n", "latin-1"),
    (b"# vim: set fileencoding=cp1252 :\n", "cp1252"),
])
def test_encoding_is_kept(cli, tmp_path, prefix, encoding):
    path = tmp_path / "train.py"
    body = CPU_SCRIPT + "label = 'caf\u00e9 \u00e0 la cr\u00e8me'\n"
    path.write_bytes(prefix + body.encode(encoding))
    assert cli("rewrite", "--in-place", str(path))[0] == 0
    data = path.read_bytes()
    assert data.startswith(prefix)
    assert data[len(prefix):].decode(encoding) == rewrite_source(body)


def test_crlf_stays_crlf_and_missing_final_newline_stays_missing(cli, tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes(CPU_SCRIPT.replace("\n", "\r\n").rstrip().encode())
    assert cli("rewrite", "--in-place", str(path))[0] == 0
    data = path.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n") > CPU_SCRIPT.count("\n")
    assert not data.endswith(b"\n")
    assert data.decode().replace("\r\n", "\n") == REWRITTEN.rstrip()


def test_missing_final_newline_stays_missing_with_lf(cli, tmp_path):
    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT.rstrip("\n"))
    assert cli("rewrite", "--in-place", str(path))[0] == 0
    assert path.read_text() == REWRITTEN.rstrip("\n")


def test_mode_is_kept(cli, tmp_path):
    path = tmp_path / "train.py"
    path.write_text("#!/usr/bin/env python\n" + CPU_SCRIPT)
    path.chmod(0o751)
    assert cli("rewrite", "--in-place", str(path))[0] == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    assert path.read_text() != "#!/usr/bin/env python\n" + CPU_SCRIPT


def test_read_only_file_is_refused(cli, tmp_path):
    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT)
    path.chmod(0o444)
    other = tmp_path / "other.py"
    other.write_text(CPU_SCRIPT)
    code, _, err = cli("rewrite", "--in-place", str(path), str(other))
    assert code == 2
    assert f"{path}: error: file is read-only; left as it is" in err.splitlines()
    assert path.read_text() == CPU_SCRIPT and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert other.read_text() == REWRITTEN  # the others are still processed


def test_undecodable_file_is_refused(cli, tmp_path):
    path = tmp_path / "train.py"
    original = b"import torch\nname = '\xff\xfe'\n"
    path.write_bytes(original)
    code, _, err = cli("rewrite", "--in-place", str(path))
    assert code == 2
    [line] = err.splitlines()
    assert line.startswith(f"{path}: error: cannot decode the file: 'utf-8' codec can't decode")
    assert path.read_bytes() == original


def test_unknown_coding_line_is_refused(cli, tmp_path):
    path = tmp_path / "train.py"
    original = b"# coding: no-such-codec\n" + CPU_SCRIPT.encode()
    path.write_bytes(original)
    code, _, err = cli("rewrite", "--in-place", str(path))
    assert (code, err.strip()) == (2, f"{path}: error: cannot decode the file: unknown encoding: no-such-codec")
    assert path.read_bytes() == original


@pytest.mark.parametrize("data", [
    b"import torch\x00\x01\x02\xff" * 10,
    CPU_SCRIPT.encode("utf-16"),
])
def test_binary_file_is_refused(cli, tmp_path, data):
    path = tmp_path / "blob.py"
    path.write_bytes(data)
    for command in (("check",), ("rewrite", "--in-place")):
        code, _, err = cli(*command, str(path))
        assert (code, err.strip()) == (2, f"{path}: error: binary file (it contains NUL bytes), not Python source")
    assert path.read_bytes() == data


def test_symlink_is_kept_and_its_target_rewritten(cli, tmp_path):
    real = tmp_path / "real" / "train.py"
    real.parent.mkdir()
    real.write_text(CPU_SCRIPT)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    assert cli("rewrite", "--in-place", str(link))[0] == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == REWRITTEN
    assert no_temp_files(tmp_path)


def test_dangling_symlink_is_an_error(cli, tmp_path):
    link = tmp_path / "link.py"
    link.symlink_to(tmp_path / "missing.py")
    code, _, err = cli("rewrite", "--in-place", str(link))
    assert (code, err.strip()) == (2, f"{link}: error: no such file or folder")
    assert link.is_symlink()


def test_empty_file_is_nothing_to_do(cli, tmp_path):
    path = tmp_path / "empty.py"
    path.write_bytes(b"")
    for command in (("check",), ("rewrite", "--in-place"), ("rewrite", "--check"), ("rewrite",)):
        code, out, err = cli(*command, str(path))
        assert code == 0 and err == ""
    assert path.read_bytes() == b""


def test_rewrite_that_does_not_parse_is_refused(cli, tmp_path, monkeypatch):
    import cpu2gpu.cli

    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT)
    monkeypatch.setattr(cpu2gpu.cli, "rewrite_data", lambda data, *args: ("utf-8", data + b"def broken(:\n"))
    code, _, err = cli("rewrite", "--in-place", str(path))
    assert code == 2
    assert err.strip() == (f"{path}: error: internal error: the rewrite does not parse "
                           "(line 4: invalid syntax); file left unchanged")
    assert path.read_text() == CPU_SCRIPT
    assert no_temp_files(tmp_path)


def test_file_changed_since_read_is_refused(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("import torch  # edited meanwhile\n")
    with pytest.raises(WriteError, match="changed on disk"):
        write_rewrite(str(path), CPU_SCRIPT.encode(), REWRITTEN.encode())
    assert path.read_text() == "import torch  # edited meanwhile\n"


@pytest.mark.parametrize("edit", ["other bytes", "same bytes, new mtime", "same size"])
def test_edit_made_while_the_temp_file_is_written_wins(cli, tmp_path, monkeypatch, edit):
    """The window between the first check and the rename: the user's edit is kept, exit 2."""
    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT)
    edited = {
        "other bytes": CPU_SCRIPT + "# the user's edit\n",
        "same bytes, new mtime": CPU_SCRIPT,
        "same size": CPU_SCRIPT.replace("(1, 1)", "(2, 2)"),
    }[edit]
    real_fsync = os.fsync

    def fsync_while_the_user_saves(fd):
        real_fsync(fd)
        path.write_text(edited)
        stamp = path.stat().st_mtime_ns + 1_000_000  # a save within the clock's tick still moves it
        os.utime(path, ns=(stamp, stamp))

    monkeypatch.setattr(os, "fsync", fsync_while_the_user_saves)
    code, out, err = cli("rewrite", "--in-place", str(path))
    assert code == 2 and "changed on disk while it was being rewritten" in err
    assert path.read_text() == edited
    assert no_temp_files(tmp_path)


def test_failed_write_leaves_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT)

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(WriteError, match="cannot write the file: No space left on device"):
        write_rewrite(str(path), CPU_SCRIPT.encode(), REWRITTEN.encode())
    assert path.read_text() == CPU_SCRIPT
    assert no_temp_files(tmp_path)


def test_unwritable_folder_is_an_error(cli, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into any folder")
    folder = tmp_path / "locked"
    folder.mkdir()
    path = folder / "train.py"
    path.write_text(CPU_SCRIPT)
    folder.chmod(0o555)
    try:
        code, _, err = cli("rewrite", "--in-place", str(path))
    finally:
        folder.chmod(0o755)
    assert code == 2 and f"{path}: error: cannot write the file: Permission denied" in err
    assert path.read_text() == CPU_SCRIPT


def big_script(blocks: int) -> str:
    block = (
        "class Net{i}(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(8, 2)  # layer {i}\n\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n\n\n"
        "def helper{i}(values):\n"
        "    total = 0\n"
        "    for v in values:\n"
        "        total += v * {i}\n"
        "    return total\n\n\n"
    )
    main = (
        "model = Net0()\n"
        "loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=8)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for inputs, targets in loader:\n"
        "    loss = nn.functional.cross_entropy(model(inputs), targets)\n"
        "    optimizer.zero_grad()\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    )
    head = "import torch\nfrom torch import nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
    return head + "".join(block.format(i=i) for i in range(blocks)) + main


def test_file_of_several_megabytes(cli, tmp_path):
    """A script that carries megabytes of data (a literal table, an embedded blob) is rewritten
    whole (its speed is measured in benchmarks/, not here)."""
    table = "TABLE = [\n" + "".join(f"    ({i}, {i * 0.5}, 'row {i}'),\n" for i in range(5_000)) + "]\n"
    blob = 'BLOB = """\n' + ("0123456789abcdef" * 8 + "\n") * 30_000 + '"""\n'
    source = big_script(20) + table + blob
    assert len(source) > 4_000_000
    path = tmp_path / "big.py"
    path.write_text(source)
    code, _, err = cli("rewrite", "--in-place", str(path))
    assert code == 0, err
    new = path.read_text()
    assert "model = Net0().to(device)" in new and new.endswith(table + blob)


# --- interrupted runs -------------------------------------------------------------------------

TEMPLATES = [big_script(n) + f"# template {n}\n" for n in (1, 2, 3, 4, 6)]


def make_tree(root: Path, count: int) -> dict[Path, tuple[bytes, bytes]]:
    """``count`` files, each with its original and its expected rewritten bytes."""
    expected = [(t.encode(), rewrite_source(t).encode()) for t in TEMPLATES]
    files = {}
    for i in range(count):
        path = root / f"pkg{i % 7}" / f"train_{i}.py"
        path.parent.mkdir(exist_ok=True)
        files[path] = expected[i % len(expected)]
        path.write_bytes(files[path][0])
    return files


# The run signals itself right after its N-th file is written: the interruption lands part-way
# through at a known point, whatever the machine's speed.
_SIGNAL_AFTER_WRITES = """
import os, signal, sys
import cpu2gpu.sources.writing as w
real, count = w.write_atomic, [0]
def write_atomic(*args, **kwargs):
    real(*args, **kwargs)
    count[0] += 1
    if count[0] == {after}:
        os.kill(os.getpid(), {signum})
w.write_atomic = write_atomic
sys.argv = ["cpu2gpu", "rewrite", "--in-place", {folder!r}]
from cpu2gpu.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_leaves_each_file_old_or_new(tmp_path, signum):
    files = make_tree(tmp_path, 150)
    script = _SIGNAL_AFTER_WRITES.format(after=5, signum=int(signum), folder=str(tmp_path))
    process = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                             timeout=HANG_GUARD_S)
    assert process.returncode != 0, process.stderr  # stopped, not finished
    states = []
    for path, (old, new) in files.items():
        data = path.read_bytes()
        assert data in (old, new), f"{path} is neither the original nor the rewrite"
        states.append(data == new)
    assert no_temp_files(tmp_path)
    assert 5 <= sum(states) < len(states)  # the files written before the signal, and not the rest


def test_signal_during_a_write_is_delivered_after_the_rename(tmp_path):
    """A signal that arrives between the temp file and the rename waits for the rename."""
    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT)
    script = (
        "import os, signal, sys\n"
        "import cpu2gpu.sources.writing as w\n"
        "real_replace = os.replace\n"
        "def replace(src, dst):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-write\n"
        "    real_replace(src, dst)\n"
        "    print('renamed', flush=True)\n"
        "w.os.replace = replace\n"
        f"w.write_atomic({str(path)!r}, {REWRITTEN.encode()!r})\n"
        "print('not reached', flush=True)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert result.returncode == -signal.SIGTERM
    assert result.stdout == "renamed\n"
    assert path.read_text() == REWRITTEN
    assert no_temp_files(tmp_path)


def test_write_atomic_replaces_content(tmp_path):
    path = tmp_path / "f.py"
    path.write_bytes(b"old")
    write_atomic(str(path), b"new")
    assert path.read_bytes() == b"new"
