"""Run directories: ``config.json``, ``history.jsonl`` (one record per line, appended and flushed as
the run goes; ``history.csv`` when it ends), and checkpoints ``ckpt_<step>.npz`` written atomically
(temporary file, fsync, rename) keeping the last few. A checkpoint at step s holds θ and the
optimizer state after s updates, the data source's state and the configuration's hash; resuming
from it re-runs steps s, s+1, … exactly as the uninterrupted run would (bitwise).

A write that fails (a full disk) raises an OSError of the same errno naming the file and what was
being written, and leaves no partial file: the temporary file is removed, a history row cut short
is cut off again, and the older checkpoints stay as they were."""
from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from contextlib import suppress
from pathlib import Path

import numpy as np

__all__ = ["RunDir", "CheckpointError", "HistoryLog"]

FORMAT = "lsa_native.train.fit/1"
_CKPT = re.compile(r"^ckpt_(\d{9})\.npz$")
# Keys that may change between an interrupted run and its resumption.
_MUTABLE = ("steps", "checkpoint_every", "keep_checkpoints")


class CheckpointError(ValueError):
    """A checkpoint or run directory that cannot be used (corrupt, truncated, another config)."""


def _canonical(config: dict) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def identity_hash(config: dict) -> str:
    ident = {k: v for k, v in config.items() if k not in _MUTABLE}
    return hashlib.sha256(_canonical(ident).encode()).hexdigest()


def _write_error(e: OSError, path: Path, what: str) -> OSError:
    """``e`` again with a message naming ``path`` and ``what`` was being written; the errno is kept
    (so is the subclass: OSError(errno, ...) picks it), so a full disk is still errno ENOSPC."""
    message = f"run_dir: writing {what} failed ({e.strerror or e})"
    return OSError(e.errno, message, str(path)) if e.errno is not None else OSError(f"{message}: {path}")


def _atomic_write(path: Path, write, what: str) -> None:
    """write(tmp) writes a temporary file, which is fsynced and renamed onto ``path``: ``path`` is
    the old file or the whole new one. On any failure the temporary file is removed."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as e:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise _write_error(e, path, what) from e
        raise


def _savez(path: Path, arrays: dict) -> None:
    with open(path, "wb") as f:  # a file object: np.savez would add ".npz" to a name
        np.savez(f, **arrays)


class HistoryLog:
    """``history.jsonl`` open for appending one JSON row per line, unbuffered (each row is on disk
    when :meth:`append` returns). A row that cannot be written whole is cut off again."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self._file = open(path, "ab", buffering=0)
        except OSError as e:
            raise _write_error(e, path, "the history") from e

    def append(self, row: dict) -> None:
        data = memoryview((json.dumps(row) + "\n").encode())
        end = self._file.seek(0, os.SEEK_END)
        try:
            while data:
                data = data[self._file.write(data):]
        except OSError as e:
            with suppress(OSError):
                self._file.truncate(end)
            raise _write_error(e, self.path, f"the history row of step {row.get('step')}") from e

    def close(self) -> None:
        self._file.close()


class RunDir:
    """One training run on disk (see the module docstring)."""

    def __init__(self, path, config: dict, *, resume: bool, keep: int):
        self.path = Path(path)
        self.config = dict(config, format=FORMAT)
        self.hash = identity_hash(self.config)
        self.keep = keep
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise type(e)(e.errno, f"run_dir: cannot create the run directory {str(self.path)!r} "
                                   f"({e.strerror})", str(self.path)) from e
        for stale in self.path.glob(".*.tmp*"):  # left by a kill during an atomic write
            stale.unlink(missing_ok=True)
        cfg_path = self.path / "config.json"
        if cfg_path.exists():
            try:
                old = json.loads(cfg_path.read_text())
            except (OSError, ValueError) as e:
                raise CheckpointError(f"run_dir: {cfg_path} is unreadable ({e})") from None
            if identity_hash(old) != self.hash:
                diff = sorted(k for k in set(old) | set(self.config)
                              if k not in _MUTABLE and old.get(k) != self.config.get(k))
                raise CheckpointError(
                    f"run_dir: {self.path} holds a run of another configuration (differs in "
                    f"{', '.join(diff)}); use a new run_dir or the same configuration")
            if not resume and (self.checkpoints() or self.history_path.exists()):
                raise CheckpointError(f"run_dir: {self.path} already holds this run; pass "
                                      "resume=True to continue it, or use a new run_dir")
        text = json.dumps(self.config, indent=1, sort_keys=True)
        _atomic_write(cfg_path, lambda tmp: tmp.write_bytes(text.encode()), "the run configuration")

    @property
    def history_path(self) -> Path:
        return self.path / "history.jsonl"

    def checkpoints(self) -> list:
        """Checkpoint paths, oldest first."""
        found = [(int(m.group(1)), p) for p in self.path.iterdir() if (m := _CKPT.match(p.name))]
        return [p for _, p in sorted(found)]

    def save(self, step: int, theta, opt_state: dict, data_state: dict, elapsed: float) -> Path:
        arrays = {"theta": np.asarray(theta, dtype=np.float64), "step": np.int64(step),
                  "elapsed": np.float64(elapsed), "config_hash": np.str_(self.hash),
                  "data_state": np.str_(json.dumps(data_state)),
                  "opt_keys": np.str_(json.dumps(sorted(opt_state)))}
        for k, v in opt_state.items():
            arrays[f"opt.{k}"] = np.asarray(v)
        path = self.path / f"ckpt_{step:09d}.npz"
        _atomic_write(path, lambda tmp: _savez(tmp, arrays), f"the checkpoint of step {step}")
        for old in self.checkpoints()[:-self.keep]:
            old.unlink(missing_ok=True)
        return path

    def load(self, path: Path, theta_size: int) -> dict:
        """The checkpoint's contents, or CheckpointError saying why it cannot be used."""
        try:
            with open(path, "rb") as f, np.load(f, allow_pickle=False) as z:
                out = {k: z[k] for k in z.files}  # reads every member: CRC checked
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:
            raise CheckpointError(
                f"checkpoint {path}: unreadable (truncated or corrupt: {e}); delete it to resume "
                "from the previous checkpoint") from None
        need = {"theta", "step", "elapsed", "config_hash", "data_state", "opt_keys"}
        if not need <= set(out):
            raise CheckpointError(f"checkpoint {path}: not a fit checkpoint (missing "
                                  f"{sorted(need - set(out))})")
        if str(out["config_hash"]) != self.hash:
            raise CheckpointError(f"checkpoint {path}: written by another configuration (model, "
                                  "optimizer or data differ); refusing to resume from it")
        theta = out["theta"]
        if theta.shape != (theta_size,):
            raise CheckpointError(f"checkpoint {path}: parameters of shape {theta.shape}, the "
                                  f"model has ({theta_size},)")
        opt = {}
        for k in json.loads(str(out["opt_keys"])):
            v = out[f"opt.{k}"]
            opt[k] = int(v) if v.ndim == 0 and v.dtype.kind == "i" else v.copy()
        return {"theta": theta.copy(), "step": int(out["step"]), "elapsed": float(out["elapsed"]),
                "data_state": json.loads(str(out["data_state"])), "opt_state": opt}

    def read_history(self, before_step: int) -> list:
        """Rows of history.jsonl with step < before_step; rewrites the file to hold just those
        (a row cut short by a kill is dropped)."""
        rows = []
        if self.history_path.exists():
            for line in self.history_path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if row.get("step", before_step) < before_step:
                    rows.append(row)
        text = "".join(json.dumps(r) + "\n" for r in rows)
        _atomic_write(self.history_path, lambda tmp: tmp.write_bytes(text.encode()),
                      f"the history of steps before {before_step}")
        return rows

    def open_history(self) -> HistoryLog:
        return HistoryLog(self.history_path)

    def write_table(self, history) -> None:
        """history.csv: the whole run as a table (written atomically, once the run ends)."""
        _atomic_write(self.path / "history.csv", history.to_csv, "the history table")
