"""Files written whole or not at all (``retrograd.files``): a full disk, a writer killed at a
random moment and two writers of one file never leave a file that was complete damaged, nor a
temporary file behind (but for a killed writer's, which cannot remove its own)."""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn
from retrograd.files import FileSet, atomic_write

pytestmark = pytest.mark.numpy_only(
    "file writes (a model's save in a subprocess on the default backend): nothing here "
    "depends on the suite's inner backend, so a torch-suite run would repeat this one"
)

SOURCE = str(Path(rg.__file__).resolve().parents[1])


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SOURCE, env.get("PYTHONPATH")]))
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    return env


def run_python(code: str, file_size_limit: int | None = None, **options):
    """``code`` in a fresh interpreter; ``file_size_limit``: no file may grow beyond it (what a
    full disk does to a write: ``EFBIG``, as ``ENOSPC``)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=child_env(),
        preexec_fn=limit if file_size_limit else None,
        timeout=120,
        **options,
    )


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_write_replaces_the_file_whole_and_keeps_the_users_permissions(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"old")
    with atomic_write(path) as file:
        file.write(b"new contents")
    assert path.read_bytes() == b"new contents"
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    assert leftovers(tmp_path) == []


def test_an_exception_while_writing_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(path, "w") as file:
        file.write("half of the new")
        raise RuntimeError("the writer failed")
    assert path.read_text() == "old"
    assert leftovers(tmp_path) == []


def test_a_file_set_replaces_every_file_or_none(tmp_path):
    for name in ("a", "b", "stale"):
        (tmp_path / name).write_text(f"old {name}")
    with pytest.raises(RuntimeError), FileSet(tmp_path, remove=["stale"]) as files:
        with files.open("a", "w") as file:
            file.write("new a")
        raise RuntimeError("b cannot be written")
    texts = [(tmp_path / n).read_text() for n in ("a", "b", "stale")]
    assert texts == ["old a", "old b", "old stale"]
    with FileSet(tmp_path, remove=["stale"]) as files:
        for name in ("a", "b"):
            with files.open(name, "w") as file:
                file.write(f"new {name}")
    assert (tmp_path / "a").read_text() == "new a" and (tmp_path / "b").read_text() == "new b"
    assert not (tmp_path / "stale").exists() and leftovers(tmp_path) == []


def test_a_full_disk_leaves_the_previous_model_intact(tmp_path):
    """``Module.save`` under a file-size limit smaller than the model: the old model.npz stays
    byte for byte, no temporary file stays, and the error names the file."""
    rg.seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.Linear(256, 64))
    path = tmp_path / "model.npz"
    model.save(path)
    before = path.read_bytes()
    completed = run_python(
        f"""
        import retrograd as rg
        from retrograd import nn
        rg.seed(1)
        model = nn.Sequential(nn.Linear(64, 256), nn.Linear(256, 64))
        try:
            model.save({str(path)!r})
        except OSError as error:
            print(error.errno, error.filename)
        """,
        file_size_limit=len(before) // 2,
    )
    assert completed.returncode == 0, completed.stderr
    errno_number, filename = completed.stdout.split()
    assert int(errno_number) in (27, 28) and filename == str(path)  # EFBIG, ENOSPC
    assert path.read_bytes() == before
    assert leftovers(tmp_path) == []


# The writer loads retrograd/files.py alone (it imports only the standard library): the
# package's import (NumPy, SciPy, torch) would cost each of the writers below seconds of CPU.
WRITER = f"""
import importlib.util, sys, numpy as np
spec = importlib.util.spec_from_file_location("files", {str(Path(rg.files.__file__))!r})
files = importlib.util.module_from_spec(spec)
spec.loader.exec_module(files)
atomic_write = files.atomic_write
path = sys.argv[1]
for version in range(1, 1_000_000):
    with atomic_write(path) as file:
        np.savez(file, values=np.full(200_000, version, dtype=np.int64))
    print(version, flush=True)
"""


def complete_version(path: Path) -> int:
    """The version a complete file holds (every value the same), or a failed assertion."""
    with np.load(path) as archive:
        values = archive["values"]
    assert values.shape == (200_000,) and (values == values[0]).all()
    return int(values[0])


def test_a_writer_killed_at_random_moments_never_leaves_a_damaged_file(tmp_path):
    path = tmp_path / "state.npz"
    with atomic_write(path) as file:
        np.savez(file, values=np.zeros(200_000, dtype=np.int64))
    generator = random.Random(0)
    seen = {0}
    for _ in range(12):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)],
            stdout=subprocess.PIPE,
            env=child_env(),
        )
        writer.stdout.readline()  # it writes; then it is killed at a random moment
        time.sleep(generator.uniform(0.0, 0.05))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        writer.stdout.close()
        seen.add(complete_version(path))
    assert len(seen) > 1  # the kills did land between writes of new versions


def test_two_writers_of_one_file_never_share_a_temporary_or_damage_it(tmp_path):
    path = tmp_path / "state.npz"
    with atomic_write(path) as file:
        np.savez(file, values=np.zeros(200_000, dtype=np.int64))
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
        for _ in range(2)
    ]
    for writer in writers:
        writer.stdout.readline()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:  # readers see a whole version, whatever the moment
        complete_version(path)
    for writer in writers:
        assert writer.poll() is None, writer.stderr.read()  # neither died on the other's file
        writer.kill()
        writer.wait()
        writer.stdout.close()
        writer.stderr.close()
    complete_version(path)


def test_a_symbolic_link_is_written_through_as_open_would(tmp_path):
    # the link stays a link and its target gets the new contents (torch.save writes through)
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "model.bin"
    target.write_bytes(b"old")
    link = tmp_path / "latest.bin"
    link.symlink_to(Path("runs") / "model.bin")
    with atomic_write(link) as file:
        file.write(b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "runs") == []
    dangling = tmp_path / "next.bin"
    dangling.symlink_to(Path("runs") / "next-model.bin")
    with atomic_write(dangling) as file:
        file.write(b"first")
    assert dangling.is_symlink() and (tmp_path / "runs" / "next-model.bin").read_bytes() == b"first"


def test_rg_save_through_a_symbolic_link_loads_back(tmp_path):
    target = tmp_path / "model.pt"
    rg.save({"w": rg.tensor([1.0, 2.0])}, target)
    link = tmp_path / "latest.pt"
    link.symlink_to(target.name)
    rg.save({"w": rg.tensor([3.0])}, link)
    assert link.is_symlink()
    assert rg.load(target)["w"].tolist() == [3.0]
